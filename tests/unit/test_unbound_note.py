"""compare says when the controllers ran one run: admission bound in no period (issue 35)."""

from orchestrator.run.tables import unbound_note


def _summary(bound: float | None, occupancy: float) -> dict:
    return {"control": {"admission_bound_fraction": bound, "decode_occupancy_mean": occupancy}}


def test_controllers_whose_admission_never_bound_are_said_to_run_one_run():
    note = unbound_note({"retire": _summary(0.0, 0.003), "buffered": _summary(0.0, 0.0029)})
    assert note is not None
    assert "0.003" in note and "tokenfactory demo" in note


def test_no_note_where_one_controller_bound_or_for_a_single_run():
    assert unbound_note({"retire": _summary(0.28, 0.68), "buffered": _summary(0.0, 0.74)}) is None
    assert unbound_note({"buffered": _summary(0.0, 0.003)}) is None
    assert unbound_note({"retire": _summary(None, 0.003), "buffered": _summary(0.0, 0.0)}) is None
