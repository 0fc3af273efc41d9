"""User-facing errors. The CLI prints any `TheseusError` as one line and exits 2."""


class TheseusError(Exception):
    """A mistake the user can fix: bad input, a missing prerequisite, a conflict."""

    exit_code = 2


class ConfigError(TheseusError):
    """A config value or key is wrong."""


class ConfigKeyError(ConfigError, AttributeError):
    """A config key does not exist (also an AttributeError, so `hasattr` works)."""


class ConfigTypeError(ConfigError, TypeError):
    """A config value does not have the declared type."""


class MissingConfigError(ConfigError):
    """Required config values were not given."""


class PluginError(TheseusError):
    """Plugins conflict, or a needed plugin is not installed."""


class JobError(TheseusError):
    """A job key, run name or run directory is wrong."""


class PreemptedError(TheseusError):
    """The run was interrupted by a signal after saving a checkpoint."""

    exit_code = 3


def one_line(error: BaseException) -> str:
    """An exception's message on one line (YAML, Orbax and XLA messages span several)."""
    return " ".join(str(error).split()) or type(error).__name__
