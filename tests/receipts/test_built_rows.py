"""`newrows.built` makes a new row's model instance exactly as the model's constructor does, only cheaper."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db.models.signals import post_init

from receipts.ingest import newrows
from receipts.models import Handoff, Run

AT = datetime(2026, 12, 5, 20, 0, tzinfo=UTC)


def _same(built, made) -> None:
    assert type(built) is type(made)
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(made).items() if k != "_state"
    }
    assert (built._state.adding, built._state.db) == (made._state.adding, made._state.db)
    assert built._state.fields_cache == made._state.fields_cache


def test_a_new_run_is_the_run_its_constructor_makes():
    values = {"operation_id": "op-1", "thread_id": "op-1", "source": Run.Source.AGENT, "created_at": AT}
    _same(newrows.built(Run, **values), Run(**values))


def test_a_new_handoff_keeps_its_run_as_the_constructor_does():
    run = Run(operation_id="op-2", thread_id="op-2", created_at=AT)
    run.pk = 7
    values = {"handoff_id": "h-2", "run": run, "verdict": "ROUTE_REJECTED", "created_at": AT, "updated_at": AT}
    built = newrows.built(Handoff, **values)
    _same(built, Handoff(**values))
    assert built.run is run and built.run_id == 7


def test_defaults_not_given_are_made_for_each_row():
    first, second = newrows.built(Handoff, handoff_id="h-3"), newrows.built(Handoff, handoff_id="h-4")
    assert first.boundaries == {} and first.boundaries is not second.boundaries
    assert first.created_at is not None and first.updated_at is not None
    assert newrows.built(Run, operation_id="op-5").health_reasons == []


@pytest.mark.parametrize("model", [Run, Handoff])
def test_a_model_whose_construction_is_listened_to_is_made_by_its_constructor(model):
    seen = []

    def listener(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(listener, sender=model)
    try:
        made = newrows.built(model, created_at=AT)
    finally:
        post_init.disconnect(listener, sender=model)
    assert seen == [made]


def test_a_field_the_model_does_not_have_is_refused_as_the_constructor_refuses_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'handof_id'"):
        newrows.built(Handoff, handof_id="h-6")
