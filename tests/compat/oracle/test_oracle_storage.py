"""Properties and the storage and replication policies against Pulsar 4.0 standalone.

The scenarios of :mod:`scenarios_storage` run as :mod:`test_oracle_rest` runs its own (same
runner, same comparison, its :data:`test_oracle_rest.ALLOWED` table too), with the
differences particular to these routes listed here with their reasons. ``HORAE_ORACLE=full``
runs every scenario, otherwise :data:`SAMPLE`.
"""

from __future__ import annotations

import fnmatch

import pytest
from peers import Peers
from scenarios_rest import Scenario
from scenarios_storage import STORAGE_SCENARIOS
from test_oracle_rest import ALLOWED, FULL, Allowed, differences, run_scenario

SAMPLE = {"topic properties", "ns offload"}
RUN = STORAGE_SCENARIOS if FULL else [s for s in STORAGE_SCENARIOS if s.name in SAMPLE]

#: Differences from Pulsar 4.0.7 in these scenarios that stay, each with its reason.
STORAGE_ALLOWED: list[Allowed] = [
    Allowed("bookie affinity", "get unset", ("status: horae 204, pulsar 404",),
            "Pulsar keeps the group in a namespace's local policies, written when one of its "
            "bundles is first owned (404 before that); a Horae namespace has its one bundle "
            "from its creation, so an unset group is 204 as on a Pulsar namespace in use"),
    Allowed("policy dispatcherPauseOnAckStatePersistent", "* set other verb",
            ("$: horae object, pulsar null",),
            "both answer 405: Pulsar's has no body (Jersey), Horae's carries {\"reason\"} as "
            "all its errors do"),
    Allowed("policy schemaValidationEnforced", "topic remove", ("$: horae object, pulsar null",),
            "Pulsar 4.0 has no such route (405 from Jersey, no body); Horae's 405 carries "
            '{"reason"} as all its errors do'),
]


def _allowed(scenario: str, label: str, line: str) -> Allowed | None:
    for entry in (*STORAGE_ALLOWED, *ALLOWED):
        if (fnmatch.fnmatchcase(scenario, entry.scenario)
                and fnmatch.fnmatchcase(label, entry.step)
                and any(fnmatch.fnmatchcase(line, pattern) for pattern in entry.lines)):
            return entry
    return None


@pytest.mark.parametrize("scenario", RUN, ids=[s.name for s in RUN])
def test_storage_routes_answer_as_pulsar(peers: Peers, scenario: Scenario) -> None:
    horae = run_scenario(peers.horae, scenario)
    pulsar = run_scenario(peers.pulsar, scenario)
    diff = differences(scenario, horae, pulsar)
    unexplained = [f"{label}: {line}" for label, line in diff
                   if _allowed(scenario.name, label, line) is None]
    used = {id(a) for label, line in diff if (a := _allowed(scenario.name, label, line))}
    stale = [f"{a.scenario} / {a.step}: {a.reason}" for a in STORAGE_ALLOWED
             if a.scenario == scenario.name and id(a) not in used]
    assert not unexplained and not stale, (
        "differences from Pulsar:\n  " + "\n  ".join(unexplained)
        + ("\nallowed differences that no longer show:\n  " + "\n  ".join(stale) if stale else ""))
