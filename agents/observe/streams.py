"""The server's name for `sidewisp_agent.streams`: the recording side lives in the agent package (issue 31 §1).

One implementation: this name is the package's module itself (the same object in `sys.modules`), so a test
that patches `agents.observe.streams.X` patches what the package reads too.
"""

import sys

from sidewisp_agent import streams

sys.modules[__name__] = streams
