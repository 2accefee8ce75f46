"""Secret values named as Pulsar names them: data:, file:, env:, a path, base64."""

from __future__ import annotations

import base64
import pathlib

import pytest

from broker.security.sources import SecretSourceError, read_secret

KEY = bytes(range(40))


def test_data_url_base64_forms() -> None:
    encoded = base64.b64encode(KEY).decode()
    assert read_secret(f"data:;base64,{encoded}", setting="k") == KEY
    assert read_secret(f"data:application/octet-stream;base64,{encoded}", setting="k") == KEY


def test_data_url_plain_is_percent_decoded() -> None:
    assert read_secret("data:,user:%24apr1%24x", setting="k") == b"user:$apr1$x"


def test_file_url_and_plain_path(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(KEY)
    assert read_secret(f"file://{path}", setting="k") == KEY
    assert read_secret(str(path), setting="k") == KEY


def test_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HORAE_TEST_SECRET", "alice:$apr1$abc")
    assert read_secret("env:HORAE_TEST_SECRET", setting="k") == b"alice:$apr1$abc"


def test_bare_base64() -> None:
    assert read_secret(base64.b64encode(KEY).decode(), setting="k") == KEY


@pytest.mark.parametrize("value, fragment", [
    ("", "is empty"),
    ("env:HORAE_TEST_UNSET_VARIABLE", "is not set"),
    ("file:///nonexistent/horae/key", "cannot read"),
    ("data:;base64,@@@", "not valid base64"),
    ("data:no-comma", "needs a ','"),
    ("not a key at all!", "not a data:"),
])
def test_unreadable_values_name_the_setting(value: str, fragment: str) -> None:
    with pytest.raises(SecretSourceError) as info:
        read_secret(value, setting="tokenSecretKey")
    assert str(info.value).startswith("tokenSecretKey")
    assert fragment in str(info.value)
