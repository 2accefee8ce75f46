"""A topic-list watcher whose connection is not writable: what it keeps and the one update it
sends when writing resumes (broker/net/topic_watchers.py), checked against a model: the client's
list, updated by every update it is sent, always ends equal to the watcher's, whatever the
events and pauses."""

from __future__ import annotations

import re
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.net import topic_watchers
from broker.net.topic_watchers import _Watcher
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.topic_list import topics_hash

NAMES = [f"persistent://public/default/w-{i}" for i in range(6)]


class _Owner:
    """The watcher's TopicWatchers: ``turn_ends`` is the end of the loop turn."""

    def __init__(self) -> None:
        self.paused = False
        self.written: list[bytes] = []
        self.due: list[_Watcher] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def flush_soon(self, watcher: _Watcher) -> None:
        self.due.append(watcher)

    def turn_ends(self) -> None:
        due, self.due = self.due, []
        if not self.paused:
            for watcher in due:
                watcher.flush()


def _updates(owner: _Owner) -> list[pb.CommandWatchTopicUpdate]:
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(owner.written))
    owner.written.clear()
    out = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        assert frame.command.type == pb.BaseCommand.WATCH_TOPIC_UPDATE  # type: ignore[union-attr]
        out.append(frame.command.watchTopicUpdate)  # type: ignore[union-attr]
    return out


def _watcher(owner: _Owner, listed: list[str]) -> _Watcher:
    watcher = _Watcher(owner, 3, "public/default", re.compile("public/default/w-.*"))  # type: ignore[arg-type]
    watcher.listed(listed)
    return watcher


def test_created_then_deleted_while_paused_is_never_told_nor_kept() -> None:
    owner = _Owner()
    watcher = _watcher(owner, [NAMES[0]])
    owner.paused = True
    for _ in range(1000):
        watcher(NAMES[1], True)
        watcher(NAMES[1], False)
    watcher(NAMES[0], False)
    watcher(NAMES[0], True)  # the client knows it: back where it was
    assert not watcher._unsent and not owner.written
    watcher(NAMES[2], True)
    watcher(NAMES[0], False)
    owner.paused = False
    watcher.flush()
    (update,) = _updates(owner)
    assert (list(update.new_topics), list(update.deleted_topics)) == ([NAMES[2]], [NAMES[0]])
    assert update.topics_hash == topics_hash([NAMES[2]])


def test_the_whole_list_answered_again_clears_what_was_not_sent() -> None:
    owner = _Owner()
    watcher = _watcher(owner, [])
    owner.paused = True
    watcher(NAMES[1], True)
    watcher.told_all()
    owner.paused = False
    watcher.flush()
    assert not owner.written


events = st.lists(st.one_of(st.tuples(st.sampled_from(NAMES), st.booleans()),
                            st.just(("turn", True)),
                            st.just(("pause", True)), st.just(("pause", False))),
                  max_size=60)


def _apply(owner: _Owner, client: set[str]) -> None:
    """The client applies each update; each carries the hash of its list once applied."""
    for update in _updates(owner):
        client.update(update.new_topics)
        client.difference_update(update.deleted_topics)
        assert update.topics_hash == topics_hash(client)


@settings(max_examples=400, deadline=None)
@given(listed=st.sets(st.sampled_from(NAMES)), steps=events,
       most=st.sampled_from([1, 2, topic_watchers.MAX_UPDATE_TOPICS]))
def test_the_client_list_always_ends_as_the_watchers(listed: set[str],
                                                      steps: list[tuple[str, bool]],
                                                      most: int) -> None:
    owner = _Owner()
    watcher = _watcher(owner, sorted(listed))
    client: set[str] = set(listed)
    truth: set[str] = set(listed)
    with mock.patch.object(topic_watchers, "MAX_UPDATE_TOPICS", most):
        for name, flag in steps:
            if name == "turn":
                owner.turn_ends()
            elif name == "pause":
                was, owner.paused = owner.paused, flag
                if was and not flag:
                    watcher.flush()  # the connection's on_writable
            else:
                watcher(name, flag)
                (truth.add if flag else truth.discard)(name)
            assert not (owner.paused and owner.written), "written while not writable"
            _apply(owner, client)
            assert len(watcher._unsent) <= len(NAMES)
        if owner.paused:
            owner.paused = False
            watcher.flush()  # on_writable
        owner.turn_ends()
        _apply(owner, client)
    assert client == truth == watcher.topics
