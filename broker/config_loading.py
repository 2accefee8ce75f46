"""Loading a :class:`broker.config.BrokerConfig`: sources merged, text typed, keys checked.

Theory of operation: :func:`load_settings` layers the defaults, a config file (TOML or Pulsar's
broker.conf, read by :mod:`broker.config_sources`), the environment (``PULSAR_PREFIX_<key>``,
then ``HORAE_<key>``) and overrides (CLI flags, test fixtures), weakest first. Every value is
converted to its field's type here (text from broker.conf or the environment is parsed: ``true``,
``10``, ``0.9``); an unknown key or a value of the wrong type is a :class:`ConfigError` naming
the key (with a "did you mean" for a case slip). Only Pulsar's own keys that Horae does not
implement are skipped, and reported (:func:`log_ignored`). Used by ``horae serve``
(:mod:`broker.cli`), :mod:`broker.embed` and tests; the settings themselves live in
:mod:`broker.config`.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass

from broker.config import FIELD_TYPES, FIELDS_BY_KEY, KEY_OF_FIELD, BrokerConfig, ConfigError
from broker.config_sources import SourceError, environment_settings, read_config_file

__all__ = ["LoadedConfig", "load_config", "load_settings", "log_ignored", "parse_value"]

log = logging.getLogger("horae.config")


_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def parse_value(want: type, text: str, *, true_words: frozenset[str] = _TRUE,
                false_words: frozenset[str] = _FALSE) -> object:
    """*text* as a setting of type *want* (bool, int, float, else the text itself);
    ValueError when it does not read as one. *true_words*/*false_words*: the spellings of a
    bool (lower-case)."""
    stripped = text.strip()
    if want is bool:
        if stripped.lower() in true_words:
            return True
        if stripped.lower() in false_words:
            return False
        raise ValueError(text)
    if want is int:
        return int(stripped)
    if want is float:
        return float(stripped)
    return text


def _from_text(key: str, want: type, text: str, source: str) -> object:
    """*text* (from broker.conf or the environment) as the field's type, or ConfigError."""
    try:
        return parse_value(want, text)
    except ValueError:
        raise ConfigError(f"config key {key!r} in {source} must be {want.__name__}, "
                          f"not {text!r}") from None


def _convert(values: Mapping[str, object], *, source: str,
             text: bool = False) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in values.items():
        f = FIELDS_BY_KEY.get(key)
        if f is None:
            hint = ""
            lowered = {k.lower(): k for k in FIELDS_BY_KEY}
            if key.lower() in lowered:
                hint = f" (did you mean {lowered[key.lower()]!r}?)"
            raise ConfigError(f"unknown config key {key!r} in {source}{hint}")
        ftype = f.type if isinstance(f.type, str) else f.type.__name__
        if ftype.endswith(" | None"):  # optional settings (e.g. brokerServicePortTls)
            ftype = ftype.removesuffix(" | None")
            if value is None or (text and isinstance(value, str) and not value.strip()):
                out[f.name] = None
                continue
        want = FIELD_TYPES[ftype]
        if text and isinstance(value, str):
            value = _from_text(key, want, value, source)
        # bool is an int subclass: `maxMessageSize = true` must not become 1.
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise ConfigError(
                f"config key {key!r} in {source} must be {want.__name__}, "
                f"not {type(value).__name__} {value!r}")
        if f.name in out and out[f.name] != value:
            raise ConfigError(f"config keys {KEY_OF_FIELD[f.name]!r} and its alias in {source} "
                              f"disagree: {out[f.name]!r} vs {value!r}")
        out[f.name] = value
    return out


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A loaded config and, per source, the Pulsar keys it set that Horae does not implement."""

    config: BrokerConfig
    ignored: dict[str, list[str]]


def load_settings(path: str | pathlib.Path | None = None,
                  overrides: Mapping[str, object] | None = None, *,
                  environ: Mapping[str, str] | None = None) -> LoadedConfig:
    """Defaults < the config file at *path* < *environ* < *overrides* (module docstring).

    The file is TOML or broker.conf (:func:`broker.config_sources.read_config_file`); *environ*
    is searched for ``PULSAR_PREFIX_<key>`` and ``HORAE_<key>``; pass ``os.environ`` to use the
    process's (None reads no environment). Raises :class:`ConfigError`.
    """
    values: dict[str, object] = {}
    ignored: dict[str, list[str]] = {}
    try:
        if path is not None:
            from_file = read_config_file(path, FIELDS_BY_KEY)
            values.update(_convert(from_file.values, source=repr(str(path)), text=True))
            if from_file.ignored:
                ignored[str(path)] = from_file.ignored
        if environ is not None:
            from_env = environment_settings(environ, FIELDS_BY_KEY)
            values.update(_convert(from_env.values, source="the environment", text=True))
            if from_env.ignored:
                ignored["PULSAR_PREFIX_* environment variables"] = from_env.ignored
    except SourceError as exc:
        raise ConfigError(str(exc)) from None
    if overrides:
        values.update(_convert(overrides, source="overrides"))
    try:
        config = BrokerConfig(**values)  # type: ignore[arg-type]
    except TypeError as exc:  # pragma: no cover - _convert already checked names
        raise ConfigError(str(exc)) from None
    return LoadedConfig(config, ignored)


def load_config(path: str | pathlib.Path | None = None,
                overrides: Mapping[str, object] | None = None, *,
                environ: Mapping[str, str] | None = None) -> BrokerConfig:
    """:func:`load_settings`, logging the skipped Pulsar-only keys as a warning."""
    loaded = load_settings(path, overrides, environ=environ)
    log_ignored(loaded.ignored)
    return loaded.config


def log_ignored(ignored: Mapping[str, list[str]]) -> None:
    for source, keys in ignored.items():
        log.warning("ignoring %d Pulsar setting(s) Horae does not implement, from %s: %s",
                    len(keys), source, ", ".join(sorted(keys)))
