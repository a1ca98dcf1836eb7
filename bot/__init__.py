"""The service: Slack and console front ends, queue and store, workers, scheduler."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trainbot")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
