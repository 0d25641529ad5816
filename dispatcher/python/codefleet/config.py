"""Client settings, read from the same settings file as the C CLI.

The file (``codefleet --config FILE``, env ``CODEFLEET_CONFIG``; the local
stack writes one per principal in ``<state>/secrets/``) holds ``key = value``
lines, parsed the way the CLI's INI reader does:

* blank lines and lines starting with ``#`` or ``;`` are comments, and so is
  the rest of a line after a ``;`` preceded by whitespace;
* ``[section]`` makes the following keys ``section.key`` (so ``[kafka]`` then
  ``sasl.username = x`` is ``kafka.sasl.username``);
* ``=`` or ``:`` separates key and value (the first of them on the line);
  whitespace around both is dropped, one pair of double quotes around the
  value too;
* ``-`` and ``_`` are the same in key names (``request_topic`` is
  ``request-topic``), except below ``kafka.``, which is passed as it is.

Keys used here: ``brokers``, ``request-topic``, ``result-topic``,
``events-topic`` and every ``kafka.<librdkafka property>`` (credentials
belong there).  Other keys (``redis-*``, ...) are the CLI's and are ignored.
Precedence, as for the CLI: defaults < file < environment
(``CODEFLEET_BROKERS``, ``CODEFLEET_REQUEST_TOPIC``, ``CODEFLEET_RESULT_TOPIC``,
``CODEFLEET_EVENTS_TOPIC``) < explicit arguments.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional

from .errors import ConfigError

__all__ = ["DEFAULT_BROKERS", "DEFAULT_REQUEST_TOPIC", "DEFAULT_RESULT_TOPIC", "DEFAULT_EVENTS_TOPIC", "Settings",
           "read_settings_file", "load_settings"]

DEFAULT_BROKERS = "127.0.0.1:19092"
DEFAULT_REQUEST_TOPIC = "codefleet.requests"
DEFAULT_RESULT_TOPIC = "codefleet.results"
DEFAULT_EVENTS_TOPIC = "codefleet.events"
_FILE_MAX = 1024 * 1024  # a settings file larger than this is a mistake (as in the CLI)
_KAFKA_PREFIX = "kafka."

_SCALARS = {"brokers": "brokers", "request-topic": "request_topic", "result-topic": "result_topic",
            "events-topic": "events_topic"}
_ENV = {"CODEFLEET_BROKERS": "brokers", "CODEFLEET_REQUEST_TOPIC": "request_topic",
        "CODEFLEET_RESULT_TOPIC": "result_topic", "CODEFLEET_EVENTS_TOPIC": "events_topic"}


@dataclass
class Settings:
    """Where the fleet is and how to talk to it.  ``kafka`` holds extra
    librdkafka properties (``sasl.username``, ``security.protocol``, ...)
    given to every producer and consumer the client creates."""

    brokers: str = DEFAULT_BROKERS
    request_topic: str = DEFAULT_REQUEST_TOPIC
    result_topic: str = DEFAULT_RESULT_TOPIC
    events_topic: str = DEFAULT_EVENTS_TOPIC
    kafka: Dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        # Settings end up in logs and tracebacks: a librdkafka property that
        # holds a secret (sasl.password, ssl.key.password, ...) is shown as
        # '***', never its value.
        kafka = {k: ("***" if _secret_key(k) else v) for k, v in self.kafka.items()}
        return (f"Settings(brokers={self.brokers!r}, request_topic={self.request_topic!r}, "
                f"result_topic={self.result_topic!r}, events_topic={self.events_topic!r}, kafka={kafka!r})")

    @property
    def cancel_topic(self) -> str:
        """Where cancels for the request topic go (SPEC.md section 12)."""
        return self.request_topic + ".cancel"

    @property
    def output_topic(self) -> str:
        """Where a streaming request's chunks come (SPEC.md section 13)."""
        return self.result_topic + ".output"


def _secret_key(key: str) -> bool:
    k = key.lower()
    return any(w in k for w in ("password", "secret", "token", "sasl.jaas", "key.pem", "private"))


def _strip_inline_comment(value: str) -> str:
    for i, ch in enumerate(value):
        if ch == ";" and i > 0 and value[i - 1] in " \t":
            return value[:i]
    return value


def read_settings_file(path: str) -> Dict[str, str]:
    """Parses a settings file into ``{key: value}`` (keys with their
    section prefix).  :class:`ConfigError` names the line of a syntax error."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _FILE_MAX:  # never block on a FIFO
            raise ConfigError(f"config file {path}: not a regular file of at most {_FILE_MAX} bytes")
        with open(path, "rb") as f:
            raw = f.read(_FILE_MAX + 1)
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path}: not UTF-8 text") from None
    if "\0" in text:
        raise ConfigError(f"config file {path}: contains NUL bytes")
    out: Dict[str, str] = {}
    section = ""
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            end = line.find("]")
            if end < 0:
                raise ConfigError(f"config file {path} line {lineno}: syntax error (expected '[section]')")
            section = line[1:end].strip()
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigError(f"config file {path} line {lineno}: syntax error (expected 'key = value' or '[section]')")
        key = line[:cut].strip()
        value = _strip_inline_comment(line[cut + 1:]).strip()
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            value = value[1:-1]
        out[f"{section}.{key}" if section else key] = value
    return out


def _apply(settings: Settings, values: Mapping[str, str]) -> None:
    for key, value in values.items():
        if key.startswith(_KAFKA_PREFIX):
            if len(key) > len(_KAFKA_PREFIX):
                settings.kafka[key[len(_KAFKA_PREFIX):]] = value
            continue
        attr = _SCALARS.get(key.replace("_", "-"))
        if attr:
            setattr(settings, attr, value)


def load_settings(path: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Settings as the CLI would see them: defaults, then the file (``path``,
    else ``$CODEFLEET_CONFIG`` when set), then the environment."""
    env = os.environ if environ is None else environ
    settings = Settings()
    path = path or env.get("CODEFLEET_CONFIG") or None
    if path:
        _apply(settings, read_settings_file(path))
    for name, attr in _ENV.items():
        if env.get(name):
            setattr(settings, attr, env[name])
    return settings
