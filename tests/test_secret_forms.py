"""The forms a secret takes when it is printed (JSON-escaped, percent-encoded, shell-quoted, ...), URL passwords
however they are written, and the keyed fingerprints a later dlrun redacts by: fuzzed (hypothesis) against
the encoders themselves (json, urllib, shlex, bash's printf %q), in text, in files cut into chunks at every
place, and through fingerprints, which must find exactly what the values find."""
from __future__ import annotations

import base64
import html
import io
import json
import shlex
import subprocess
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dlrun.secrets import (MIN_TEXT_MATCH, REDACTED, Redactor, has_url_password, redact_argv, redact_env,
                           redact_text, redact_url_passwords, secret_names, secret_parts, short_secrets)
from dlrun.secrets.prints import fingerprints, prints_redactor

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow])
KEY = bytes(range(32))

#: Encoders a program uses to print a value, as they write it (the encoders themselves, not dlrun's copy).
ENCODERS = {
    "plain": lambda v: v,
    "json": lambda v: json.dumps(v),
    "json-utf8": lambda v: json.dumps(v, ensure_ascii=False),
    "json-in-json": lambda v: json.dumps({"t": v}),
    "url": lambda v: quote(v, safe=""),
    "url-path": lambda v: quote(v),
    "url-form": lambda v: quote_plus(v),
    "shlex": shlex.quote,
    "repr": repr,
    "ascii": ascii,
    "html": html.escape,
    "base64": lambda v: base64.b64encode(v.encode()).decode(),
}
VALUES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=MIN_TEXT_MATCH, max_size=40)


def _clear_of(redacted: str, value: str, encoded: str) -> bool:
    return encoded not in redacted and value not in redacted.replace(REDACTED, "\0")


@FUZZ
@given(value=VALUES, encoder=st.sampled_from(sorted(ENCODERS)), before=st.sampled_from(["", "x", "leak: ", "{\"a\": "]))
def test_every_common_encoding_of_a_value_is_redacted(value, encoder, before):
    encoded = ENCODERS[encoder](value)
    assume(value not in REDACTED and REDACTED not in value)
    text = f"{before}{encoded}\n"
    assert _clear_of(redact_text(text, [value]), value, encoded)


@FUZZ
@given(value=VALUES, encoder=st.sampled_from(sorted(ENCODERS)), filler=st.text(st.sampled_from(" ab\n{}\"\\%"),
                                                                               max_size=30))
def test_fingerprints_find_exactly_what_the_values_find(value, encoder, filler):
    """The recovery path (keyed fingerprints, without the value) redacts the same spans as the value itself."""
    text = filler + ENCODERS[encoder](value) + filler[::-1]
    known = Redactor.known([value])
    printed = prints_redactor(fingerprints([value], KEY), KEY)
    assert printed.text(text) == known.text(text)


@FUZZ
@given(value=VALUES, encoder=st.sampled_from(sorted(ENCODERS)), before=st.integers(0, 40), after=st.integers(0, 40),
       chunk=st.integers(1, 17))
def test_files_are_redacted_whatever_their_chunks(value, encoder, before, after, chunk):
    encoded = ENCODERS[encoder](value).encode()
    assume(value not in REDACTED and REDACTED not in value)
    data = b"." * before + encoded + b"|" * after
    for redactor in (Redactor.known([value]), prints_redactor(fingerprints([value], KEY), KEY)):
        out = io.BytesIO()
        assert redactor.stream(io.BytesIO(data), out, chunk_bytes=chunk)
        text = out.getvalue().decode(errors="replace")
        assert encoded.decode() not in text and value not in text.replace(REDACTED, "\0")


def test_printf_q_and_quoted_forms_as_bash_writes_them():
    value = "it's a sëcret $(x) & more"
    for program in ('printf "%q\\n" "$V"', 'echo "${V@Q}"', 'declare -p V'):
        out = subprocess.run(["bash", "-c", program], env={"V": value}, capture_output=True, text=True,
                             check=True).stdout
        assert value not in redact_text(out, [value]) and REDACTED in redact_text(out, [value]), program


# ------------------------------------------------------------------------------------------ URL passwords
USER = st.from_regex(r"[a-z][a-z0-9._-]{0,8}", fullmatch=True)
HOST = st.from_regex(r"[a-z][a-z0-9-]{0,10}\.example(:[0-9]{2,5})?", fullmatch=True)
PATH = st.from_regex(r"(/[A-Za-z0-9._-]{0,8}){0,3}", fullmatch=True)
PASSWORD = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="@\"'<>`"),
                   min_size=1, max_size=24)


def _port_and_path(password: str) -> bool:
    """`host:5000/x@...` reads as a port and a path (an image digest reference): the documented exception."""
    digits = len(password) - len(password.lstrip("0123456789"))
    return 0 < digits <= 5 and password[digits:digits + 1] == "/"


@FUZZ
@given(user=USER, password=PASSWORD, host=HOST, path=PATH, scheme=st.sampled_from(["https", "postgres", "git+ssh"]))
def test_a_url_password_is_a_secret_whatever_it_holds(user, password, host, path, scheme):
    assume(not _port_and_path(password))
    value = f"{scheme}://{user}:{password}@{host}{path}"
    assert has_url_password(value)
    assert secret_names({"CONN": value, "OTHER": "x"}) == {"CONN"}
    assert redact_env({"CONN": value}) == {"CONN": REDACTED}
    assert redact_argv(["dlrun", "run", "--env", f"CONN={value}"])[-1] == f"CONN={REDACTED}"
    assert redact_text(f"connect {value} now") == f"connect {scheme}://{user}:{REDACTED}@{host}{path} now"
    assert password in secret_parts(value)


@FUZZ
@given(user=USER, words=st.lists(PASSWORD, min_size=2, max_size=3), host=HOST, path=PATH)
def test_a_url_password_with_spaces_is_a_secret_as_a_value(user, words, host, path):
    password = " ".join(words)
    assume(not _port_and_path(password))
    value = f"https://{user}:{password}@{host}{path}"
    assert has_url_password(value) and secret_names({"CONN": value}) == {"CONN"}
    assert redact_url_passwords(value, whole=True) == f"https://{user}:{REDACTED}@{host}{path}"
    assert password in secret_parts(value)


@pytest.mark.parametrize("value", ["https://github.com/org/repo.git", "ssh://git@github.com/x", "user@host:/path",
                                   "docker://localhost:5000/dlrun/pytorch@sha256:0123abcd", "a=b:c@d",
                                   "https://h.example:8443/a@b", "https://h.example/a:b@c", "mailto:me@x.example"])
def test_urls_without_a_password_are_not_secret(value):
    assert not has_url_password(value) and redact_text(value) == value


def test_the_audit_url_passwords():
    for value, password in (("https://bob:pa/ss@h.example/x", "pa/ss"), ("https://bob:pa ss@h.example/x", "pa ss"),
                            ("https://u:p@ss@h.example/x", "p@ss"), ("https://u:a/b@c@h.example/x", "a/b@c"),
                            ("https://u:pa%2Fss@h.example/x", "pa%2Fss")):
        assert has_url_password(value), value
        assert password in secret_parts(value)
    assert "pa/ss" in secret_parts("https://u:pa%2Fss@h.example/x")  # decoded too


def test_short_secrets_are_named_with_what_is_short():
    env = {"SHORT_TOKEN": "x9q", "DB_URL": "postgres://u:pw@db/x", "LONG_TOKEN": "long-enough", "EMPTY_KEY": ""}
    assert short_secrets(env, secret_names(env)) == [("DB_URL", "URL password", 2), ("SHORT_TOKEN", "value", 3)]


def test_a_value_with_undecodable_bytes_is_redacted_as_its_bytes(tmp_path):
    """os.environ holds a variable's undecodable bytes as surrogates; a rank prints the bytes themselves."""
    value = "tok\udcff-s3cret"
    log = tmp_path / "rank.log"
    log.write_bytes(b"a tok\xff-s3cret b tok%FF-s3cret\n")
    for redactor in (Redactor.known([value]), prints_redactor(fingerprints([value], KEY), KEY)):
        log.write_bytes(b"a tok\xff-s3cret b tok%FF-s3cret\n")
        assert redactor.file(log)
        assert log.read_bytes() == f"a {REDACTED} b {REDACTED}\n".encode()
