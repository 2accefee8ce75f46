"""Basic authentication over htpasswd entries: bcrypt, Apache MD5 (apr1) and crypt."""

from __future__ import annotations

import base64

import bcrypt
import pytest
from passlib.hash import apr_md5_crypt, des_crypt

from broker.security.basic_auth import BasicAuthenticator, decode_basic_header, parse_htpasswd
from broker.security.errors import AuthenticationError, SecurityConfigError


@pytest.fixture(scope="module")
def users() -> BasicAuthenticator:
    text = "\n".join([
        "# users",
        f"bea:{bcrypt.hashpw(b'bcrypt-pw', bcrypt.gensalt(4)).decode()}",
        "bey:" + bcrypt.hashpw(b"2y-pw", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1),
        f"apr:{apr_md5_crypt.hash('apr:pw')}",
        f"des:{des_crypt.hash('despw')}",
        "",
    ])
    return BasicAuthenticator(parse_htpasswd(text))


@pytest.mark.parametrize("credentials, role", [
    ("bea:bcrypt-pw", "bea"), ("bey:2y-pw", "bey"), ("apr:apr:pw", "apr"), ("des:despw", "des"),
])
def test_each_hash_scheme_accepts_its_password(users: BasicAuthenticator, credentials: str,
                                               role: str) -> None:
    assert users.authenticate(credentials) == role
    assert users.authenticate(credentials) == role  # second time from the success cache


@pytest.mark.parametrize("credentials", ["bea:wrong", "apr:apr", "nobody:x", "des:", "bea:"])
def test_wrong_password_and_unknown_user_get_one_text(users: BasicAuthenticator,
                                                      credentials: str) -> None:
    with pytest.raises(AuthenticationError) as info:
        users.authenticate(credentials)
    assert info.value.detail == "Unknown user or invalid password"


def test_credentials_without_colon_refused(users: BasicAuthenticator) -> None:
    with pytest.raises(AuthenticationError) as info:
        users.authenticate("bea")
    assert info.value.detail == "Base64 decoded params are invalid"


@pytest.mark.parametrize("line, fragment", [
    ("justaname", "format of the password auth conf file is invalid"),
    ("plain:secret", "unsupported hash"),
    ("sha:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "unsupported hash"),
])
def test_bad_htpasswd_lines_fail_startup(line: str, fragment: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        parse_htpasswd(f"ok:{apr_md5_crypt.hash('x')}\n{line}\n")
    assert "line 2" in str(info.value)
    assert fragment in str(info.value)


def test_basic_header_decoding() -> None:
    assert decode_basic_header("Basic " + base64.b64encode(b"u:p:q").decode()) == "u:p:q"
    for header, text in (("Bearer abc", 'has to be started with "Basic "'),
                         ("Basic", "Base64 encoded token is not found"),
                         ("Basic !!!", "Base64 decoding is failure")):
        with pytest.raises(AuthenticationError) as info:
            decode_basic_header(header)
        assert text in info.value.detail
