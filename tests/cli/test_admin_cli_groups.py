"""``horae-admin`` declares only the commands of the group its command line names.

Each declared group must be the same as in the whole parser (every command, every option), so
a command line parses the same either way.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.admin import main as admin_main


def _sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _shape(parser: argparse.ArgumentParser) -> list[tuple[Any, ...]]:
    return sorted((tuple(a.option_strings), a.dest, a.nargs, a.required, str(a.default), a.help)
                  for a in parser._actions)


def test_group_names_are_every_group_of_the_parser() -> None:
    assert set(_sub_commands(admin_main.build_parser())) == admin_main._GROUP_NAMES


def test_each_named_group_declares_exactly_the_commands_of_the_whole_parser() -> None:
    whole = _sub_commands(admin_main.build_parser())
    for name in sorted(admin_main._GROUP_NAMES):
        argv = ["--admin-url", "http://127.0.0.1:1", name, "x"]
        built = _sub_commands(admin_main.build_parser(argv))
        assert set(built) == set(whole)   # every group is still listed
        mine, theirs = _sub_commands(built[name]), _sub_commands(whole[name])
        assert set(mine) == set(theirs) and mine, name
        for command in theirs:
            assert _shape(mine[command]) == _shape(theirs[command]), (name, command)


def test_a_command_line_that_names_no_known_group_gets_the_whole_parser() -> None:
    for argv in (["--tok", "abc", "topics", "list", "public/default"], ["--help"], []):
        assert admin_main._named_group(argv) not in admin_main._GROUP_NAMES
        built = _sub_commands(admin_main.build_parser(argv))
        assert all(_sub_commands(group) for group in built.values())
    # an abbreviated top-level option still parses: the whole parser is built for it
    args = admin_main.build_parser(["--tok", "abc", "topics", "list", "public/default"]).parse_args(
        ["--tok", "abc", "topics", "list", "public/default"])
    assert (args.token, args.group, args.command) == ("abc", "topics", "list")


def test_one_group_declares_a_fraction_of_the_parsers() -> None:
    argv = ["topics", "list", "public/default"]
    whole, one = admin_main.build_parser(), admin_main.build_parser(argv)
    assert one.parse_args(argv) == whole.parse_args(argv)
    assert _count(one) * 3 < _count(whole)


def _count(parser: argparse.ArgumentParser) -> int:
    return 1 + sum(_count(sub) for sub in _sub_commands(parser).values())
