"""The one rule for secrets: which variables are secret, and how their values are kept out of every file, store
row and printed line.

A variable is secret when its NAME has a secret word as one of its parts (`HF_TOKEN`, `GITHUB_PAT`,
`DB_PASS`, `apiKey`), when its VALUE is a URL carrying a password (`postgres://user:pw@db/x`, also a password
with `/` or spaces that was not percent-encoded), when the user marks it (`--secret-env NAME`), or when its
value is the value of a secret variable (`COPY=$HF_TOKEN` passed again under a harmless name;
`reused_secret_names` finds those among dlrun's own environment too). Names are split into parts at `_`, `-`,
`.` and lower-to-upper case changes, so `KEY` matches `AWS_ACCESS_KEY_ID` but not `MONKEY` or
`KEYBOARD_LAYOUT` (`rules`).

Secret values reach the ranks through the environment of the job, never as text: rendered scripts refer to
them by name (`${HF_TOKEN}`), and every capture (plan, environment, argv, store) shows `<redacted>`. What a
rank or tool prints is the second net: every form of every secret value (as it is, JSON-escaped,
percent-encoded, shell-quoted, Python- and HTML-escaped, base64; `forms`) is taken out of failure reasons,
status files, results, the terminal and every file of the run directory (`redact`), by value while dlrun
knows the values and by their keyed fingerprints (`prints`) when a later dlrun recovers or exports the run.
Values shorter than MIN_TEXT_MATCH characters are not looked for in text (the plan's checks warn about them).
"""
from dlrun.secrets.forms import forms, needles
from dlrun.secrets.redact import (ENV_OPTIONS, KnownForms, Redactor, plan_redactor, plan_secret_values, redact_argv,
                                  redact_data, redact_env, redact_file, redact_text)
from dlrun.secrets.rules import (MIN_TEXT_MATCH, NOT_SECRET, REDACTED, SECRET_PARTS, SECRET_SUFFIXES,
                                 has_url_password, is_secret, is_secret_name, name_parts, redact_url_passwords,
                                 reused_secret_names, secret_names, secret_parts, short_secrets, url_password_spans)

__all__ = ["ENV_OPTIONS", "MIN_TEXT_MATCH", "NOT_SECRET", "REDACTED", "SECRET_PARTS", "SECRET_SUFFIXES", "KnownForms",
           "Redactor", "forms", "has_url_password", "is_secret", "is_secret_name", "name_parts", "needles",
           "plan_redactor", "plan_secret_values", "redact_argv", "redact_data", "redact_env", "redact_file",
           "redact_text", "redact_url_passwords", "reused_secret_names", "secret_names", "secret_parts",
           "short_secrets", "url_password_spans"]
