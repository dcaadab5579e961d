"""A worker's state built without the frozen dataclass's setters is the dataclass's."""

from dataclasses import fields

from workers.state import WorkerState, new_state


def test_new_state_is_the_dataclass_built_the_same():
    values = ("prefill-0", "prefill", "prefill", 3, 1, 0.0, 8.0e10, 12_345, 2.5, 1, True)
    built, made = new_state(*values), WorkerState(*values)
    assert built == made and hash(built) == hash(made)
    # Every field, in the class's order, and nothing else.
    assert list(vars(built)) == [f.name for f in fields(WorkerState)]
    assert [getattr(built, f.name) for f in fields(WorkerState)] == list(values)
