"""Read-side queries for the operator pages.

Every function here runs a fixed number of queries however many runs and
handoffs exist (select_related, one aggregate per question, bounded slices),
so the pages stay fast as the tables grow. Nothing here changes state.

Counts at scale (issue 13), one rule each:
- a run's handoffs, problem handoffs, open false completions and latest verdict are
  stored on the run (receipts.ingest.health.refresh keeps them), never counted per request;
- the open false completions in total are the sum of the runs' stored counts (a
  partial index holds only the runs that have any);
- a list's total is counted up to `COUNT_BOUND` and shown as "1,000+" past it
  (`bounded_count`): an honest "many" rather than scanning every match per request;
- the overview's handoffs per verdict are counted up to `VERDICT_COUNT_BOUND` each,
  one short index range per verdict (`overview_counts`);
- open waits are counted exactly: the partial index `handoff_open_waits` holds only them.

Settled verdicts (spec v1.2): a handoff in progress (receipts.ingest.health.due_part) is shown as
such, and the run page reads its run row in the same statement as its handoffs, so the
run's health and the handoffs' verdicts always come from one snapshot.

The modules: `counts` (bounded counts, the change marker), `lists` (the pages' lists and the run search),
`paging` (keyset and numbered pages), `runpage` (a run's timeline, grids and reports), `windows` (the
overview's time window). Callers read every name through this package (`dashboard.runs(...)`).
"""

from __future__ import annotations

from receipts.queries.dashboard.counts import (
    COUNT_BOUND,
    IN_PROGRESS,
    TASK_STATUSES,
    VERDICT_COUNT_BOUND,
    VERDICT_ORDER,
    BoundedCount,
    bounded_count,
    change_marker,
    in_progress_counts,
    overview_counts,
    run_status_counts,
)
from receipts.queries.dashboard.lists import (
    LIST_LIMIT,
    NEWEST_LIMIT,
    SETTLEMENT_CAUSES,
    SOONEST_LIMIT,
    RunFilters,
    distinct_values,
    exact_match,
    false_completion_count,
    false_completions,
    false_completions_query,
    newest_handoffs,
    open_totals,
    open_wait_count,
    open_waits,
    open_waits_query,
    runs,
    search_choices,
)
from receipts.queries.dashboard.paging import KeysetPage, OffsetPage, keyset_page, offset_page
from receipts.queries.dashboard.runpage import (
    BOUNDARY_PARTS,
    REPORT_LIMIT,
    TIMELINE_LIMIT,
    BoundaryCell,
    HandoffView,
    ReportGroup,
    boundary_grids,
    handoff_view,
    missing_context_keys,
    run_handoff_count,
    run_report_groups,
    run_reports,
    run_timeline,
)
from receipts.queries.dashboard.windows import (
    DURATION_SAMPLE,
    ROLLUP_FROM,
    SPARK_BUCKETS,
    WINDOW_ROW_LIMIT,
    WindowStats,
    window_stats,
)

__all__ = [
    "BOUNDARY_PARTS",
    "COUNT_BOUND",
    "DURATION_SAMPLE",
    "IN_PROGRESS",
    "LIST_LIMIT",
    "NEWEST_LIMIT",
    "REPORT_LIMIT",
    "ROLLUP_FROM",
    "SETTLEMENT_CAUSES",
    "SOONEST_LIMIT",
    "SPARK_BUCKETS",
    "TASK_STATUSES",
    "TIMELINE_LIMIT",
    "VERDICT_COUNT_BOUND",
    "VERDICT_ORDER",
    "WINDOW_ROW_LIMIT",
    "BoundaryCell",
    "BoundedCount",
    "HandoffView",
    "KeysetPage",
    "OffsetPage",
    "ReportGroup",
    "RunFilters",
    "WindowStats",
    "boundary_grids",
    "bounded_count",
    "change_marker",
    "distinct_values",
    "exact_match",
    "false_completion_count",
    "false_completions",
    "false_completions_query",
    "handoff_view",
    "in_progress_counts",
    "keyset_page",
    "missing_context_keys",
    "newest_handoffs",
    "offset_page",
    "open_totals",
    "open_wait_count",
    "open_waits",
    "open_waits_query",
    "overview_counts",
    "run_handoff_count",
    "run_report_groups",
    "run_reports",
    "run_status_counts",
    "run_timeline",
    "runs",
    "search_choices",
    "window_stats",
]
