"""The server's name for `sidewisp_agent.fields`: the receipt shapes live in the agent package (issue 31 §1).

One implementation: this name is the package's module itself (the same object in `sys.modules`), so a test
that patches `receipts.verdicts.fields.X` patches what the recording side reads too.
"""

import sys

from sidewisp_agent import fields

sys.modules[__name__] = fields
