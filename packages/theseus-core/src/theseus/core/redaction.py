"""The one redaction rule for everything that leaves a run folder: a plan, a bootstrap
script, a submission, a page or an answer of ``theseus serve``, a log shown.

A value is hidden (replaced by :data:`REDACTED`) three ways:

* **by name**: the value of a key whose name names a credential (:func:`is_secret_name`),
  at any depth of a mapping, in ``KEY=VALUE`` / ``KEY: VALUE`` / ``"KEY": "VALUE"`` text and
  after a ``--key`` flag. A name is secret when one of its words (split at ``.``, ``_``,
  ``-`` and camelCase) contains ``secret``, ``password``, ``passwd``, ``passphrase``,
  ``credential``, ``cookie`` or ``bearer``; starts with ``auth`` (``auth``,
  ``authorization``); ends with ``token``, ``key``, ``keys`` or ``pwd`` (``hf_token``,
  ``api_key``, ``wandbKey``, ``DB_PWD``); or is ``pat``, ``pass``, ``pwd`` or ``pw``
  (``GITHUB_PAT``). Counts, units and tools are not credentials: ``tokenizer``,
  ``total_tokens``, ``max_new_tokens``, ``n_experts_per_token`` are shown. A run record's ``key`` is its job key (``gpt/train/sft``),
  not a credential: :func:`redact_record` shows it.
* **by shape**, wherever it appears: the ``user:password@`` of a URL, what follows
  ``Bearer`` or an ``Authorization:`` header's scheme, tokens of the known credential
  formats (``ghp_...``, ``github_pat_...``, ``hf_...``, ``sk-...``, ``AKIA...``, ``xoxb-...``,
  ``glpat-...``, JSON web tokens...) and private-key blocks
  (``-----BEGIN ... PRIVATE KEY-----`` to its ``END`` line).
* **by value**: the value of every environment variable whose name is secret (at least
  :data:`MIN_LENGTH` characters: a shorter one would match innocent text), wherever it
  appears (:func:`environment_secrets`; ``PWD``/``OLDPWD`` are the working directory).

Ordinary values stay readable: a learning rate, a path, a job key, a tokenizer name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"
MIN_LENGTH = 8
NOT_SECRET_VARIABLES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories

_WORDS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_CONTAINS = ("secret", "password", "passwd", "passphrase", "credential", "cookie", "bearer")
_ENDS = ("token", "key", "keys", "pwd")
_EXACT = frozenset({"pat", "pass", "pwd", "pw"})

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_AUTHORIZATION = re.compile(
    r"(?i)\b(?P<head>(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?)"
    r"(?P<value>[^\s\"',;]+)"
)
_TOKENS = re.compile(
    r"\b(?:gh[opusr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|hf_[A-Za-z0-9]{20,}|sk-(?:[A-Za-z]+-)?[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20,}|pypi-[A-Za-z0-9_-]{20,}"
    r"|npm_[A-Za-z0-9]{20,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END (?P=kind)PRIVATE KEY-----|\Z)",
    re.S,
)
_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
_ASSIGNMENT = re.compile(
    r"(?P<key>[\"']?[A-Za-z_][A-Za-z0-9_.-]*[\"']?)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;{}\[\]]+)"
)
_NOTHING = ("", "null", "None", "~", "[]", "{}", REDACTED)  # an unset value hides nothing
_FLAG = re.compile(r"(?P<flag>--?[A-Za-z][A-Za-z0-9_-]*)(?P<sep>=|\s+)(?P<value>[^\s\"'-][^\s]*)")


def is_secret_word(word: str) -> bool:
    word = word.lower()
    return (
        word in _EXACT
        or any(part in word for part in _CONTAINS)
        or word.startswith("auth")
        or word.endswith(_ENDS)
    )


def is_secret_name(name: str) -> bool:
    """Whether any word of ``name`` (a key, a dotted key, an environment variable) names a
    credential (see the module docstring); a word after ``per`` is a unit
    (``n_experts_per_token``, ``flops_per_token``), not a credential."""
    words = [word for word in _WORDS.split(name.strip("'\"")) if word]
    units = {i + 1 for i, word in enumerate(words) if word.lower() == "per"}
    return any(is_secret_word(word) for i, word in enumerate(words) if i not in units)


def environment_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{name: value}`` of the environment variables whose name is secret and whose value
    is at least :data:`MIN_LENGTH` characters long (``environ``: default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in sorted(environ.items())
        if name not in NOT_SECRET_VARIABLES and is_secret_name(name) and len(value) >= MIN_LENGTH
    }


def _values(secrets: Iterable[str] | None) -> list[str]:
    found = environment_secrets().values() if secrets is None else secrets
    return sorted({v for v in found if len(v) >= MIN_LENGTH}, key=len, reverse=True)


def redact_string(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with the secret values of the environment (``secrets``: these values
    instead), private-key blocks, URL credentials, bearer and ``Authorization`` values and
    known token formats replaced by :data:`REDACTED`."""
    for value in _values(secrets):
        text = text.replace(value, REDACTED)
    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m.group('head')}{REDACTED}", text)  # idempotent
    return _TOKENS.sub(REDACTED, text)


def redact_tree(node: Any, secret: bool = False, secrets: Iterable[str] | None = None) -> Any:
    """A JSON-like value with the value of every secret-named key (at any depth) replaced,
    and every string cleaned by :func:`redact_string`."""
    values = _values(secrets)
    if secret and node not in ("", None, [], {}):
        return REDACTED
    if isinstance(node, dict):
        return {
            key: redact_tree(value, is_secret_name(str(key)), values) for key, value in node.items()
        }
    if isinstance(node, list):
        return [redact_tree(value, False, values) for value in node]
    if isinstance(node, str):
        return redact_line(node, values)
    return node


def redact_record(record: dict[str, Any], secrets: Iterable[str] | None = None) -> dict[str, Any]:
    """A run record (``job.json``) as shown: :func:`redact_tree`, but its ``key`` is the job
    key (``gpt/train/pretrain``), shown as it is (cleaned of secret values and shapes)."""
    values = _values(secrets)
    shown = redact_tree({k: v for k, v in record.items() if k != "key"}, False, values)
    if "key" in record:
        key = record["key"]
        shown = {"key": redact_string(key, values) if isinstance(key, str) else key, **shown}
    return shown


def redact_line(line: str, secrets: Iterable[str] | None = None) -> str:
    """One line of text with the values of secret-named keys (``KEY=VALUE``, ``KEY: VALUE``,
    ``"KEY": "VALUE"``, ``--key VALUE``) and everything :func:`redact_string` hides
    replaced."""
    values = _values(secrets)

    def assignment(match: re.Match) -> str:
        value = match.group("value")
        if not is_secret_name(match.group("key")) or value.strip("'\"") in _NOTHING:
            return match.group(0)
        if match.string.startswith(" " + REDACTED, match.end()):  # a scheme: Basic <redacted>
            return match.group(0)
        quote = value[0] if value[:1] in ("'", '"') else ""
        return f"{match.group('key')}{match.group('sep')}{quote}{REDACTED}{quote}"

    def flag(match: re.Match) -> str:
        if not is_secret_name(match.group("flag").lstrip("-")):
            return match.group(0)
        return f"{match.group('flag')}{match.group('sep')}{REDACTED}"

    line = redact_string(line, values)
    return _FLAG.sub(flag, _ASSIGNMENT.sub(assignment, line))


class LineRedactor:
    """Lines of a log as shown, one at a time or as a stream: :func:`redact_line` each, and
    every line of a private-key block (its ``BEGIN`` line to its ``END`` line) replaced."""

    def __init__(self, secrets: Iterable[str] | None = None) -> None:
        self.values = _values(secrets)
        self.inside = False  # within a private-key block
        self.partial = ""  # a streamed line not ended yet

    def line(self, line: str) -> str:
        """One whole line (without its newline) as shown."""
        if not self.inside and _KEY_BEGIN.search(line) and not _KEY_END.search(line):
            self.inside = True
            return redact_line(_KEY_BEGIN.split(line)[0], self.values) + REDACTED
        if self.inside:
            self.inside = not _KEY_END.search(line)
            if self.inside:
                return REDACTED
            return REDACTED + redact_line(_KEY_END.split(line)[-1], self.values)
        return redact_line(line, self.values)

    def feed(self, text: str) -> str:
        """The lines ``text`` completes, as shown (a line not ended yet waits for the rest)."""
        *lines, self.partial = (self.partial + text).split("\n")
        return "".join(self.line(line) + "\n" for line in lines)

    def flush(self) -> str:
        """What is left of a stream that ended without a newline, as shown."""
        rest, self.partial = self.partial, ""
        return self.line(rest) if rest else ""


def redact_lines(lines: Iterable[str], secrets: Iterable[str] | None = None) -> list[str]:
    """Lines of a log as shown (:class:`LineRedactor`)."""
    redactor = LineRedactor(secrets)
    return [redactor.line(line) for line in lines]


def redact_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """Free text of many lines (a script, a plan, a log) as shown: :func:`redact_lines`."""
    lines = redact_lines(text.split("\n"), secrets)
    return "\n".join(lines)


_YAML_KEY_LINE = re.compile(r"^(\s*(?:-\s+)?)([^\s:#][^:#]*?)(\s*:\s*)(\S.*)?$")


def is_secret_key(key: str) -> bool:
    """Whether any part of the dotted ``key`` names a credential."""
    return any(is_secret_name(part) for part in key.split("."))


def redact_config_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """YAML text with the value of every credential-named key replaced (line by line, so a
    file that does not parse is redacted too; a block value under such a key is dropped),
    then every line as :func:`redact_lines` shows it."""
    out: list[str] = []
    hiding_deeper_than: int | None = None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if hiding_deeper_than is not None:
            if line.strip() and indent <= hiding_deeper_than:
                hiding_deeper_than = None
            else:
                continue
        match = _YAML_KEY_LINE.match(line)
        if match and is_secret_key(match.group(2)):
            lead, key, _, value = match.groups()
            out.append(f"{lead}{key}: {REDACTED!r}")
            if not value:  # a block below it
                hiding_deeper_than = indent
            continue
        out.append(line)
    return "\n".join(redact_lines(out, secrets)) + ("\n" if text.endswith("\n") else "")
