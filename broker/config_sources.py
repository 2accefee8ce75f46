"""Where broker settings come from: config files (TOML or Pulsar's broker.conf) and the environment.

Theory of operation
-------------------
:mod:`broker.config` owns the settings, their types and their validation; this module only turns
outside text into ``{camelCaseKey: value}`` mappings for it, and reports where each came from.

Files (:func:`read_config_file`). Two formats, chosen by extension, else by content:

- TOML (``.toml``): typed values, flat keys or a ``[broker]`` table.
- Pulsar's ``broker.conf`` (``.conf``, ``.properties``): Java-properties lines ``key=value``
  (``key: value`` too), ``#`` or ``!`` comments, a trailing ``\\`` continues a line. Values are
  text, typed later by the field they set. An empty value means "not set", as in Pulsar, where
  most keys of the shipped file are empty.
- Anything else: TOML if it parses as TOML, otherwise broker.conf.

Environment (:func:`environment_settings`), as Pulsar's container image does it:

- ``PULSAR_PREFIX_<key>=value`` sets ``<key>`` (any broker.conf key).
- ``HORAE_<key>=value`` sets ``<key>`` and beats ``PULSAR_PREFIX_<key>``. ``<key>`` is the
  camelCase name (``HORAE_brokerServicePort``) or its upper snake form
  (``HORAE_BROKER_SERVICE_PORT``). A camelCase one that is no setting is an error. An upper-case
  one that is no setting is an error when it is a near-miss of a setting's upper snake name
  (``HORAE_BROKER_SERVICE_PRT``, by the typo rule below); any other is left alone: Horae's own
  tools and tests read such names (``HORAE_ADMIN_URL``, ``HORAE_CRASH_STATES``) from the same
  environment the broker runs in.

Unknown keys. A TOML file or a ``HORAE_`` variable belongs to Horae, so a key it does not know is
an error (a typo must not be ignored). A broker.conf or a ``PULSAR_PREFIX_`` variable may have
been written for Pulsar, which has hundreds of settings Horae does not implement: those are
returned in ``ignored`` for the caller to log, unless the key differs from a Horae key only in
case or by a typo's worth (then it is an error naming the key meant). A typo is a misspelt
*word*: the two keys, split at their camelCase humps, differ in one word only, and those two
words are spelt alike (``brokerServicePrt``). Pulsar's own keys often differ from each other by
one whole word (``managedLedgerMinLedgerRolloverTimeMinutes`` beside ``...Max...``), or by an
added word (``brokerServicePortTls``): those are other settings, skipped, never typos, so a
real Pulsar broker.conf loads.
"""

from __future__ import annotations

import difflib
import pathlib
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Settings",
    "environment_settings",
    "parse_broker_conf",
    "parse_env_file",
    "read_config_file",
]

TOML_SUFFIXES = frozenset({".toml"})
BROKER_CONF_SUFFIXES = frozenset({".conf", ".properties"})
HORAE_PREFIX = "HORAE_"
PULSAR_PREFIX = "PULSAR_PREFIX_"
#: How close (difflib ratio) an unknown broker.conf key must be to a Horae key to be a typo.
TYPO_RATIO = 0.9
#: How alike the one differing word of the two keys must be spelt (``Prt``/``Port`` is 0.86,
#: ``Min``/``Max`` 0.33).
TYPO_WORD_RATIO = 0.6
_UPPER_SNAKE = re.compile(r"[A-Z][A-Z0-9_]*")
_HUMPS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


class SourceError(ValueError):
    """A source cannot be read; :mod:`broker.config` re-raises it as its ConfigError."""


@dataclass(slots=True)
class Settings:
    """``{camelCaseKey: value}`` from one source, and the foreign keys it skipped."""

    values: dict[str, object] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def _typo_of(key: str, known: Collection[str]) -> str | None:
    lowered = {k.lower(): k for k in known}
    if key.lower() in lowered:
        return lowered[key.lower()]
    for candidate in difflib.get_close_matches(key, list(known), n=3, cutoff=TYPO_RATIO):
        if _misspelt_word(key, candidate):
            return candidate
    return None


def _misspelt_word(key: str, candidate: str) -> bool:
    """True when *key* is *candidate* with one word misspelt (not swapped, added or dropped)."""
    words = [w.lower() for w in _HUMPS.findall(key)]
    other = [w.lower() for w in _HUMPS.findall(candidate)]
    changes = [op for op in difflib.SequenceMatcher(a=words, b=other).get_opcodes()
               if op[0] != "equal"]
    if len(changes) != 1:
        return False
    tag, a0, a1, b0, b1 = changes[0]
    if tag != "replace" or a1 - a0 != 1 or b1 - b0 != 1:
        return False
    return difflib.SequenceMatcher(a=words[a0], b=other[b0]).ratio() >= TYPO_WORD_RATIO


def _foreign(values: Mapping[str, object], known: Collection[str], source: str) -> Settings:
    """Keep Horae's keys; skip Pulsar-only ones, but refuse near-misses of Horae keys."""
    out = Settings()
    for key, value in values.items():
        if key in known:
            out.values[key] = value
            continue
        meant = _typo_of(key, known)
        if meant is not None:
            raise SourceError(f"unknown config key {key!r} in {source} (did you mean {meant!r}?)")
        out.ignored.append(key)
    return out


def parse_broker_conf(text: str) -> dict[str, str]:
    """``{key: value}`` of Java-properties text (Pulsar's broker.conf); empty values skipped."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
        if match is None:  # pragma: no cover - the pattern matches any non-empty line
            continue
        key, value = match.group(1), match.group(2).strip()
        if value:
            out[key] = value
        else:
            out.pop(key, None)
    return out


def parse_env_file(text: str) -> dict[str, str]:
    """``{NAME: value}`` of a systemd EnvironmentFile / compose env file (``NAME=value``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise SourceError(f"environment file line {raw!r} is not NAME=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name.strip()] = value
    return out


def _read_toml(text: str, source: str) -> dict[str, object]:
    doc = tomllib.loads(text)
    broker_table = doc.pop("broker", None)
    if broker_table is not None:
        if not isinstance(broker_table, dict):
            raise SourceError(f"[broker] in {source} must be a table")
        doc.update(broker_table)
    return doc


def read_config_file(path: str | pathlib.Path, known: Collection[str]) -> Settings:
    """The settings of the TOML or broker.conf file at *path* (see the module docstring)."""
    p = pathlib.Path(path)
    source = repr(str(p))
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError(f"config file {source} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"config file {source} cannot be read: {exc}") from None
    suffix = p.suffix.lower()
    if suffix in TOML_SUFFIXES:
        try:
            return Settings(_read_toml(text, source))
        except tomllib.TOMLDecodeError as exc:
            raise SourceError(f"config file {source} is not valid TOML: {exc}") from None
    if suffix not in BROKER_CONF_SUFFIXES:
        try:
            return Settings(_read_toml(text, source))
        except tomllib.TOMLDecodeError:
            pass  # not TOML: read it as broker.conf
    return _foreign(parse_broker_conf(text), known, source)


def environment_settings(environ: Mapping[str, str], known: Collection[str]) -> Settings:
    """Settings from ``PULSAR_PREFIX_<key>`` and ``HORAE_<key>`` variables (HORAE_ wins)."""
    pulsar = {name.removeprefix(PULSAR_PREFIX): value for name, value in environ.items()
              if name.startswith(PULSAR_PREFIX) and len(name) > len(PULSAR_PREFIX)}
    out = _foreign({k: v for k, v in pulsar.items() if v != ""}, known,
                   f"{PULSAR_PREFIX}* environment variables")
    snake = {_upper_snake(key): key for key in known}
    horae: dict[str, tuple[str, str]] = {}   # key -> (variable, value)
    for name, value in sorted(environ.items()):
        if not name.startswith(HORAE_PREFIX) or name.startswith(PULSAR_PREFIX):
            continue
        suffix = name.removeprefix(HORAE_PREFIX)
        if suffix in known:
            key = suffix
        elif _UPPER_SNAKE.fullmatch(suffix):
            if suffix not in snake:
                meant = _typo_of(_camel(suffix), known)
                if meant is None:
                    continue   # no setting, nor a near-miss of one: it belongs to another tool
                raise SourceError(f"environment variable {name} names no config key "
                                  f"(did you mean {HORAE_PREFIX}{_upper_snake(meant)}?)")
            key = snake[suffix]
        else:
            meant = _typo_of(suffix, known)
            hint = f" (did you mean {HORAE_PREFIX}{meant}?)" if meant else ""
            raise SourceError(f"environment variable {name} names no config key{hint}")
        if key in horae and horae[key][1] != value:
            raise SourceError(f"environment variables {horae[key][0]} and {name} "
                              f"both set {key!r}, to different values")
        horae[key] = (name, value)
    out.values.update({key: value for key, (_name, value) in horae.items()})
    return out


def _upper_snake(key: str) -> str:
    """brokerServicePort -> BROKER_SERVICE_PORT; journalMaxGroupWaitMSec -> JOURNAL_MAX_GROUP_WAIT_MSEC."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).upper()


def _camel(upper_snake: str) -> str:
    """BROKER_SERVICE_PRT -> brokerServicePrt (to compare it word by word with the keys)."""
    first, *rest = upper_snake.lower().split("_")
    return first + "".join(word.capitalize() for word in rest)
