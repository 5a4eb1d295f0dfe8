"""The hosted runtime: Sidewisp's Celery workers drive the registered graphs of hosted runs.

The registry (entries, graphs, registry, graphcache), starting and driving runs (hosting,
execution, runner, leases, checkpoints), approval waits (waits), per-run workspaces, scripted
models and fault injection. The lower modules (faults, scripted, workspaces, graphs, entries,
graphcache, checkpoints, leases) import neither agents.limits nor the modules above them, so
agents.observe and agents.limits can build on them.

May import: agents.observe, agents.limits, agents.models, receipts, Django, LangChain and LangGraph;
agents.tasks only from hosting (HostingRuntime enqueues the tasks); never: agents.demo, sidewisp.
"""
