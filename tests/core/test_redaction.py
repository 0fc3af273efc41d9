"""The one redaction rule, both ways: credentials hidden by key name, by value shape and by
the values of secret environment variables; job keys and ordinary values shown as they are."""

from __future__ import annotations

import pytest
from theseus.core.redaction import (
    REDACTED,
    LineRedactor,
    environment_secrets,
    is_secret_name,
    redact_config_text,
    redact_line,
    redact_lines,
    redact_record,
    redact_tree,
)

ENV = {
    "GITHUB_PAT": "ghp_" + "a1" * 18,
    "DB_PWD": "hunter2-hunter2",
    "MY_SECRET": "shh-it-is-a-secret",
    "SHORT_TOKEN": "abc",  # too short to hide: it would match innocent text
    "PWD": "/home/me/project",  # the working directory, not a password
    "OLDPWD": "/home/me",
    "PATH": "/usr/bin:/bin",
}


@pytest.mark.parametrize(
    "name",
    ["pwd", "password", "sessionCookie", "token", "secret", "api_key", "wandbKey", "HF_TOKEN",
     "GITHUB_PAT", "DB_PWD", "db_pass", "auth", "Authorization", "client_secret", "passphrase",
     "data.dataset_options.hf_token", "private_keys"],
)  # fmt: skip
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["tokenizer", "total_tokens", "max_new_tokens", "n_experts_per_token",
     "flops_per_token", "learning_rate", "passes", "patience", "path", "seq_len", "dataset"],
)  # fmt: skip
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_environment_secrets_are_the_credential_named_long_enough_ones():
    found = environment_secrets(ENV)
    assert found == {k: ENV[k] for k in ("DB_PWD", "GITHUB_PAT", "MY_SECRET")}


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("token=abc123 step=3", f"token={REDACTED} step=3"),
        ('{"password": "pa55", "user": "me"}', f'{{"password": "{REDACTED}", "user": "me"}}'),
        ("run --password pa55 --steps 3", f"run --password {REDACTED} --steps 3"),
        ("run --api-key=pa55", f"run --api-key={REDACTED}"),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
        ("curl -H 'Authorization: Bearer abc.def'", f"curl -H 'Authorization: Bearer {REDACTED}'"),
        ("push to https://me:pa55@github.com/x", f"push to https://{REDACTED}@github.com/x"),
        ("got ghp_" + "Z" * 36 + " back", f"got {REDACTED} back"),
        ("AWS AKIAABCDEFGHIJKLMNOP used", f"AWS {REDACTED} used"),
        ("sessionCookie: s%3Aabc", f"sessionCookie: {REDACTED}"),
        ("hf_token: ''", "hf_token: ''"),  # an unset value hides nothing
        # ordinary lines stay as they are
        ("step 10 loss 2.31 lr=3e-4", "step 10 loss 2.31 lr=3e-4"),
        ("tokenizer=bpe total_tokens=1000", "tokenizer=bpe total_tokens=1000"),
        ("n_experts_per_token: 2", "n_experts_per_token: 2"),
        ("saved /runs/base/checkpoints/100", "saved /runs/base/checkpoints/100"),
    ],
)
def test_lines_by_name_and_shape(line, shown):
    assert redact_line(line, secrets=()) == shown


def test_environment_values_are_hidden_wherever_they_appear():
    secrets = environment_secrets(ENV).values()
    line = f"connect db/{ENV['DB_PWD']} as {ENV['GITHUB_PAT']} from {ENV['PWD']} with abc"
    assert (
        redact_line(line, secrets)
        == f"connect db/{REDACTED} as {REDACTED} from /home/me/project with abc"
    )


def test_a_private_key_block_is_hidden_line_by_line_and_in_a_stream():
    lines = ["before", "-----BEGIN RSA PRIVATE KEY-----", "MIIEow", "AAAA", "-----END RSA PRIVATE KEY-----", "after"]  # fmt: skip
    assert redact_lines(lines, secrets=()) == [
        "before",
        REDACTED,
        REDACTED,
        REDACTED,
        REDACTED,
        "after",
    ]
    stream = LineRedactor(secrets=())
    text = "\n".join(lines) + "\ntail"
    out = "".join(stream.feed(text[i : i + 7]) for i in range(0, len(text), 7)) + stream.flush()
    assert out == "\n".join(["before", REDACTED, REDACTED, REDACTED, REDACTED, "after", "tail"])
    assert "MIIEow" not in out


def test_a_record_shows_its_job_key_and_hides_its_secrets():
    record = {
        "key": "gpt/train/pretrain",
        "status": "finished",
        "error": "login failed with token=abc123",
        "history": [{"changed": {"data.dataset_options.pwd": ["x", "y"], "training.total_steps": [1, 2]}}],
    }  # fmt: skip
    shown = redact_record(record, secrets=())
    assert shown["key"] == "gpt/train/pretrain" and shown["status"] == "finished"
    assert shown["error"] == f"login failed with token={REDACTED}"
    assert shown["history"][0]["changed"] == {
        "data.dataset_options.pwd": REDACTED,
        "training.total_steps": [1, 2],
    }
    # elsewhere a key named 'key' is a credential
    assert redact_tree({"options": {"key": "abc"}}, secrets=()) == {"options": {"key": REDACTED}}


def test_config_text_hides_blocks_under_secret_keys_and_keeps_the_rest():
    text = (
        "data:\n  tokenizer: bpe\n  dataset_options:\n    credentials:\n      user: me\n"
        "      pass: x\n    dsn: db/hunter2-hunter2\nmodel:\n  n_experts_per_token: 2\n"
    )
    shown = redact_config_text(text, secrets=["hunter2-hunter2"])
    assert shown == (
        "data:\n  tokenizer: bpe\n  dataset_options:\n    credentials: '<redacted>'\n"
        f"    dsn: db/{REDACTED}\nmodel:\n  n_experts_per_token: 2\n"
    )
