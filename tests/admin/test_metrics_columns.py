"""TopicColumns: per-family columns of the topics' rows, kept, patched or built again."""

from __future__ import annotations

from broker.metrics.topic_columns import TopicColumns


def _rows(n: int, width: int, tag: str = "") -> list[tuple[object, tuple[str, ...]]]:
    return [(("sig", i), tuple(f"t{i}f{j}{tag}\n" for j in range(width))) for i in range(n)]


def _transposed(rows: list[tuple[object, tuple[str, ...]]], width: int) -> list[list[str]]:
    return [[row[1][j] for row in rows] for j in range(width)]


def test_the_same_rows_get_the_same_columns() -> None:
    kept = TopicColumns()
    rows = _rows(10, 3)
    first = kept.columns("snapshot", rows, 3)
    assert first == _transposed(rows, 3) and kept.rebuilt == 1
    again = kept.columns("snapshot", list(rows), 3)
    assert all(a is b for a, b in zip(again, first, strict=True)) and kept.patched == 1


def test_a_changed_row_patches_only_the_columns_that_differ_and_copies_them() -> None:
    kept = TopicColumns()
    rows = _rows(10, 3)
    first = kept.columns("snapshot", rows, 3)
    before = [list(column) for column in first]
    new_texts = list(rows[4][1])
    new_texts[1] = "changed\n"   # family 1 rendered again; families 0 and 2 kept as they were
    rows2 = list(rows)
    rows2[4] = (("sig", 4, "moved"), tuple(new_texts))
    second = kept.columns("snapshot", rows2, 3)
    assert second == _transposed(rows2, 3)
    assert second[0] is first[0] and second[2] is first[2] and second[1] is not first[1]
    assert [list(column) for column in first] == before   # handed-out columns never change
    rows3 = list(rows2)
    rows3[9] = (("sig", 9, "moved"), tuple(f"x{j}\n" for j in range(3)))
    assert kept.columns("snapshot", rows3, 3) == _transposed(rows3, 3)
    assert kept.rebuilt == 1 and kept.patched == 2


def test_moved_places_or_mostly_new_rows_build_every_column() -> None:
    kept = TopicColumns()
    rows = _rows(10, 2)
    kept.columns("snapshot", rows, 2)
    fewer = rows[1:]   # a topic unloaded: every place after it moved
    assert kept.columns("snapshot", fewer, 2) == _transposed(fewer, 2)
    renewed = _rows(9, 2, "new")   # every row new
    assert kept.columns("snapshot", renewed, 2) == _transposed(renewed, 2)
    assert kept.columns("prometheus", renewed, 2) == _transposed(renewed, 2)   # per format
    assert kept.rebuilt == 4 and kept.patched == 0
    assert kept.columns("snapshot", [], 2) == [[], []]
    kept.clear()
    assert kept.columns("snapshot", renewed, 2) == _transposed(renewed, 2)
    assert kept.rebuilt == 6
