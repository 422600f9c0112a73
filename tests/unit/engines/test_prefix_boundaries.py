"""Boundaries that recur (the end of a system message) and the entries saved there."""

from __future__ import annotations

from pathlib import Path

from gateway.engines.prefix_boundaries import RecurringPrefixes, system_boundary
from gateway.engines.prefix_disk import DiskPrefixes
from tests.unit.engines.test_prefix_disk import MODEL, PRINT, first_rows, make_cache
from tests.unit.fake_runner import FakeRunner

SYSTEM = {"role": "system", "content": "You are the museum's reference librarian. " * 2}


def test_the_system_message_ends_where_rendering_it_alone_ends() -> None:
    runner = FakeRunner()
    messages = [SYSTEM, {"role": "user", "content": "Which ships?"}]
    tokens = runner.render_chat(messages)
    assert system_boundary(runner, messages, (), tokens) == len(SYSTEM["content"])
    # No system message, or nothing after it: no boundary of its own.
    assert system_boundary(runner, messages[1:], (), tokens) == 0
    assert system_boundary(runner, messages[:1], (), tokens) == 0


def test_recurring_prefixes_are_bounded_and_matched_by_prefix() -> None:
    recurring = RecurringPrefixes(max_prefixes=2)
    a, b, c = ([n] * 40 for n in (1, 2, 3))
    recurring.note(a, 40)
    recurring.note([*b, 9], 40)
    recurring.note(a, 40)  # seen again: the newest now
    recurring.note(c, 40)  # b, the oldest, goes
    recurring.note([4] * 10, 10)  # too short to be worth a file
    assert recurring.snapshot() == [tuple(a), tuple(c)]
    assert recurring.within([*a, 5]) == [tuple(a)]
    assert recurring.within(a) == []  # not beyond it: the whole prompt is saved anyway


def test_a_boundary_is_saved_cut_from_a_longer_cache_which_is_left_alone(tmp_path: Path) -> None:
    conversation = list(range(1000, 1100))
    cache = make_cache(len(conversation))
    disk = DiskPrefixes(tmp_path, 1 << 30)
    assert disk.save(MODEL, PRINT, conversation[:60], cache)
    assert cache[0].offset == len(conversation)  # the stored cache is untouched
    assert not disk.save(MODEL, PRINT, conversation[:60], cache)  # once
    assert disk.save(MODEL, PRINT, conversation, cache)
    sizes = {len(e.tokens): e.nbytes for e in disk.entries(MODEL, PRINT)}
    assert sizes[60] < 0.8 * sizes[100]  # only what it holds: not the whole buffer
    loaded = disk.load(disk.best(MODEL, PRINT, [*conversation[:60], 7], 0))  # type: ignore[arg-type]
    assert loaded is not None and first_rows(loaded) == [float(i) for i in range(60)]
