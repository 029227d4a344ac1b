"""The recording proxy: OpenAI / Anthropic compatible endpoints per session, every call recorded in
token space and merged into trajectories (see README, "Recording proxy").

The app is built by :func:`coderl.proxy.app.create_app`; this package face stays light because the
config layer imports its section (:mod:`coderl.proxy.config`).
"""

from coderl.proxy.config import ProxyConfig, RelayWorkerConfig

__all__ = ["ProxyConfig", "RelayWorkerConfig"]
