"""The topic's replace-by-key switch resolves its policy again only when a policy record changed.

Every appended run asks :meth:`TopicReplaceByKey.sync` which schedule is in force; the policy
behind it is resolved again only when the policy records' generation moved, and every way the
records change moves it (set, remove, keep fields, drop)."""

from __future__ import annotations

from pathlib import Path

from broker.topics.policies import NS_REPLACE_BY_KEY, TOPIC_REPLACE_BY_KEY
from broker.topics.policy_records import PolicyRecords
from broker.topics.replace_by_key import TopicReplaceByKey
from storage.metadata import MetadataStore

NS = "public/default"
TOPIC = "persistent://public/default/switch"


async def test_the_policy_is_resolved_again_only_after_a_records_change(tmp_path: Path) -> None:
    md = await MetadataStore.open(tmp_path / "m.db")
    try:
        records = PolicyRecords(md)
        await records.load()
        resolved: list[bool] = []

        def enabled() -> bool:
            on = bool(records.topic(TOPIC).get(TOPIC_REPLACE_BY_KEY)
                      or records.namespace_value(NS, NS_REPLACE_BY_KEY))
            resolved.append(on)
            return on

        rbk = TopicReplaceByKey(None, enabled, lambda: [],  # type: ignore[arg-type]
                                generation=lambda: records.generation)
        assert rbk.sync([]) is None
        assert rbk.sync([]) is None
        assert resolved == [False]  # the second run found the records unchanged

        await records.set_namespace_field(NS, NS_REPLACE_BY_KEY, True)
        on = rbk.sync([])
        assert on is not None
        assert rbk.sync([]) is on  # the same schedule, not resolved again
        assert resolved == [False, True]

        await records.remove_namespace_field(NS, NS_REPLACE_BY_KEY)
        assert rbk.sync([]) is None
        assert resolved == [False, True, False]

        await records.set_topic_field(TOPIC, TOPIC_REPLACE_BY_KEY, True)
        assert rbk.sync([]) is not None
        await records.keep_topic_fields(TOPIC, frozenset())
        assert rbk.sync([]) is None
        await records.set_topic_field(TOPIC, TOPIC_REPLACE_BY_KEY, True)
        assert rbk.sync([]) is not None
        await records.drop_topic(TOPIC)
        assert rbk.sync([]) is None
        assert resolved == [False, True, False, True, False, True, False]
    finally:
        await md.close()


async def test_without_a_generation_every_run_resolves_the_policy(tmp_path: Path) -> None:
    resolved: list[bool] = []

    def enabled() -> bool:
        resolved.append(True)
        return True

    rbk = TopicReplaceByKey(None, enabled, lambda: [])  # type: ignore[arg-type]
    first = rbk.sync([])
    assert first is not None
    assert rbk.sync([]) is first
    assert resolved == [True, True]
