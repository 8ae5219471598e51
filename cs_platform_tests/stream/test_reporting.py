"""When a live run writes its progress to Dagster (``cs_platform.stream.reporting``)."""

from cs_platform.stream.reporting import Cadence, liveness_beat_seconds


def cadence_at(every_s: float) -> tuple[Cadence, list[float]]:
    now = [100.0]
    return Cadence(every_s, clock=lambda: now[0]), now


def test_the_first_report_is_due_at_once_then_one_per_interval():
    cadence, now = cadence_at(60)
    due = []
    for second in range(0, 181, 2):  # a landing every 2 s for three minutes
        now[0] = 100.0 + second
        due.append(cadence.due())
    assert due.count(True) == 4  # at 0, 60, 120 and 180 s
    assert [i * 2 for i, d in enumerate(due) if d] == [0, 60, 120, 180]


def test_an_urgent_report_is_due_at_once_and_restarts_the_wait():
    cadence, now = cadence_at(60)
    assert cadence.due()
    now[0] += 30
    assert not cadence.due() and cadence.due(urgent=True)
    now[0] += 59
    assert not cadence.due()  # 59 s after the urgent one
    now[0] += 1
    assert cadence.due()


def test_an_interval_of_zero_reports_every_time():
    cadence, _ = cadence_at(0)
    assert all(cadence.due() for _ in range(5))


def test_a_live_run_marks_itself_alive_well_within_stale_run_seconds():
    assert liveness_beat_seconds(120) == 10  # at most every 10 s
    assert liveness_beat_seconds(12) == 3  # a quarter of it
    assert liveness_beat_seconds(1) == 0.5  # never more than twice a second
    for stale in (1.5, 12, 120, 86400):
        assert liveness_beat_seconds(stale) <= stale / 3
