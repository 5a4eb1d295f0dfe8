"""The server's side of the agent package (`sidewisp_agent`, issue 31): its store and its settings.

The recording side (the middleware, the observer, the writer, decisions) is the package's; the server installs
its database as the package's store (`database`, by `writer.install` when Django starts) or, in remote mode,
the package's HTTP store on its settings (`remote`). The server's own callers (hosted runs, the demo) import
the recording side's names from the package, as any app does.

May import: sidewisp_agent, receipts (models, ingest, verdicts, workers), agents.host.faults (test-only fault
hooks), Django; never: agents.demo, agents.limits, the rest of agents.host, sidewisp.
"""
