"""``coderl`` entry point: subcommands of DESIGN.md ("Command line")."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from coderl import __version__, allocator
from coderl.cli.argtypes import at_least, port_number
from coderl.errors import CoderlError
from coderl.memory import bound_heap
from coderl.signals import stop_on_sigterm, terminated

Handler = Callable[[argparse.Namespace], int]

# Subcommands whose capability is not built yet, with the issue that builds it.
NOT_BUILT: dict[str, tuple[str, int]] = {}
NOT_BUILT_SERVE: dict[str, tuple[str, int]] = {}
NOT_BUILT_BENCH: dict[str, tuple[str, int]] = {}


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config file (optional)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. engine.max_batch_size=8")


def _split_config(ns: argparse.Namespace) -> tuple[str | None, list[str]]:
    """argparse cannot tell 'a.yaml' from 'k=v' positionally; a first arg containing '=' is an override."""
    items = ([ns.config] if ns.config else []) + list(ns.overrides)
    if items and "=" not in items[0]:
        return items[0], items[1:]
    return None, items


def _not_built(what: str, issue: int) -> Handler:
    def run(_: argparse.Namespace) -> int:
        print(f"coderl: {what} is not built yet (planned in issue #{issue}).", file=sys.stderr)
        return 2

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coderl",
        description="Train coding agents with reinforcement learning from verifiable rewards.",
        epilog="Config: YAML file, CODERL_SECTION__KEY env vars and key.sub=value overrides (CLI > env > YAML).",
    )
    parser.add_argument(
        "--version", action="version", version=f"coderl {__version__} (C allocator: {allocator.active()})"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name, (what, issue) in NOT_BUILT.items():
        p = sub.add_parser(name, help=f"{what} [not built yet: issue #{issue}]")
        _config_args(p)
        p.set_defaults(func=_not_built(what, issue))

    p = sub.add_parser(
        "train",
        help="the main job: RL on train.tasks (rollout -> grade -> advantages -> update -> sync), report.html",
        description="Train the policy with RL. The packaged defaults run (coderl/configs/"
        "train.yaml: SmolLM2-135M, swe agent with the symbol tools, bundled:synth?bug_in=callee with 24 "
        "held-out tasks, a supervised warm start on gold demonstrations, then up to 8 GRPO steps of 2 tasks "
        "x 8 samples with LoRA, asynchronous (rollouts of the next step while the actor updates), on tasks a "
        "calibration pass found at the policy's edge: as many as fit the run's 28.5 minutes "
        "(train.run_minutes), at least 4); a config file's keys "
        "and the overrides change only what they name. --bare starts from the built-in defaults instead.",
    )
    _config_args(p)
    p.add_argument(
        "--bare",
        action="store_true",
        help="start from the built-in defaults (coderl/config) instead of the packaged recipe "
        "(coderl/configs/train.yaml), e.g. for a recipe of its own such as coderl/configs/remote_codex.yaml",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run (after a crash or kill -9) from its newest checkpoint",
    )
    p.set_defaults(func=_lazy("coderl.cli.train_cmd", "run_train"))
    p = sub.add_parser(
        "sft",
        help="supervised warm start on demonstrations (sft.data: gold:TASKS, runs:DIR) -> a model folder",
        description="Train the policy to imitate demonstrations - gold-patch demonstrations played through the "
        "configured loop (sft.data=[gold:bundled:synth]) and resolved trajectories of earlier runs "
        "(runs:DIR) - with the loss on the assistant's tokens only. Held-out tasks are refused. Writes a "
        "Hugging Face checkpoint folder (default <run dir>/model) that coderl train model.path=... starts from. "
        "Its config is the one coderl train would run with the same arguments: the packaged recipe, then the "
        "config file and overrides (the same loop and prompt RL will use); --bare starts from the built-in defaults.",
    )
    _config_args(p)
    p.add_argument("--out", help="the model folder to write (default: <run dir>/model)")
    p.add_argument(
        "--bare",
        action="store_true",
        help="start from the built-in defaults instead of coderl train's packaged recipe (as coderl train --bare)",
    )
    p.set_defaults(func=_lazy("coderl.cli.sft_cmd", "run_sft"))
    p = sub.add_parser(
        "export",
        help="a train run's checkpoint as a model folder (LoRA merged) for coderl eval, coderl train or a server",
        description="Write a Hugging Face checkpoint folder from a coderl train run's checkpoint: the run's actor "
        "rebuilt from its config.yaml, the checkpoint loaded, LoRA adapters merged into the weights they sat on "
        "(the run's warm start, or model.path) as the run's engine received them, so a greedy coderl eval of the "
        "folder decodes what the run's greedy validation of that step did. coderl-demos.json beside the weights "
        "lists every task they trained on (imitated, or rolled out for training up to that step): a later run "
        "from the folder never holds one out. Evaluate it: coderl eval model.path=OUT tasks.source=...",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory of a coderl train run")
    p.add_argument("--step", type=int, help="the checkpoint's step (default: the newest the run kept)")
    p.add_argument("--out", help="the model folder to write (default: RUN_DIR/export/step-N)")
    p.set_defaults(func=_lazy("coderl.cli.export_cmd", "run_export"))
    p = sub.add_parser(
        "eval", help="roll out tasks.source with rollout.agent, grade, write report.json (pass@k)"
    )
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.eval_cmd", "run_eval"))
    p = sub.add_parser("rollout", help="roll out tasks.source and write trajectories (no grading)")
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.eval_cmd", "run_rollout"))

    p = sub.add_parser("view", help="browse a run's trajectories, turns, patches and tokens in the browser")
    p.add_argument("run_dir", help="a run directory, or a folder of them (e.g. runs/)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8765)
    p.set_defaults(func=_lazy("coderl.cli.view_cmd", "run_view"))

    p = sub.add_parser("demo", help="generate with the embedded default engine: a quick end-to-end check")
    _config_args(p)
    p.add_argument("--requests", type=at_least(1), default=8, help="concurrent chat requests (default 8)")
    p.add_argument("--max-tokens", type=at_least(1), default=96, help="tokens per completion (default 96)")
    p.set_defaults(func=_lazy("coderl.cli.demo", "run_demo"))

    engine = sub.add_parser("engine", help="inference engine servers").add_subparsers(
        dest="engine_cmd", metavar="CMD"
    )
    p = engine.add_parser("serve", help="serve the embedded engine over HTTP (vLLM/SGLang-compatible subset)")
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.serve", "run_engine_serve"))
    proxy = sub.add_parser("proxy", help="the recording proxy").add_subparsers(
        dest="proxy_cmd", metavar="CMD"
    )
    p = proxy.add_parser(
        "serve",
        help="OpenAI / Anthropic endpoints per session that record every call in token space "
        "(proxy.mode=relay: served by workers that connect to /ws/worker)",
    )
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.proxy_cmd", "run_proxy_serve"))
    p = proxy.add_parser(
        "worker",
        help="relay mode: serve the configured engine to a proxy (proxy.mode=relay) over an outgoing WebSocket",
        description="Connect out to a relay-mode proxy's /ws/worker (relay.url, relay.token) and serve the "
        "configured engine (embedded by default; engine.type=http for vLLM / SGLang / coderl servers) until "
        "SIGTERM / SIGINT, reconnecting with exponential backoff and jitter when the connection drops.",
    )
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.worker_cmd", "run_proxy_worker"))
    for name, (what, issue) in NOT_BUILT_SERVE.items():
        grp = sub.add_parser(name, help=f"{what} [not built yet: issue #{issue}]").add_subparsers(
            metavar="CMD"
        )
        p = grp.add_parser("serve", help=f"{what} [not built yet: issue #{issue}]")
        _config_args(p)
        p.set_defaults(func=_not_built(what, issue))

    tasks = sub.add_parser(
        "tasks", help="inspect, check and convert tasks (tasks.source=...)"
    ).add_subparsers(dest="tasks_cmd", metavar="CMD")
    p = tasks.add_parser("list", help="list the tasks of tasks.source (default: the bundled suite)")
    _config_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON list on stdout")
    p.set_defaults(func=_lazy("coderl.cli.tasks_cmd", "run_tasks_list"))
    p = tasks.add_parser("validate", help="gold patch resolves, empty and tests-only patches do not")
    _config_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_lazy("coderl.cli.tasks_cmd", "run_tasks_validate"))
    p = tasks.add_parser("convert", help="write tasks.source as a self-contained Parquet dataset")
    p.add_argument("output", help="output .parquet file")
    p.add_argument(
        "--format",
        choices=("coderl", "verl"),
        default="coderl",
        help="coderl: a task dataset coderl reads back (tasks.source=dataset:FILE); verl: verl's RL dataset "
        "schema (data_source, prompt, ability, reward_model, extra_info, agent_name) for data.train_files, "
        "each row carrying its whole task for the coderl agent loop",
    )
    p.add_argument(
        "--agent-name", default="coderl", help="verl: the agent_name of every row (default: coderl)"
    )
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.tasks_cmd", "run_tasks_convert"))

    p = tasks.add_parser(
        "calibrate",
        help="estimate each task's pass rate under the configured model: --k samples per task, saved beside the tasks",
        description="Roll every task of train.tasks (what train.curriculum draws from) out --k times with the configured model and rollout settings, "
        "grade each, and save per-task samples and passes beside the tasks (keyed by the model and the "
        "settings that change the pass rate); train.curriculum=edge reads them. Also writes a run directory "
        "(trajectories, report.json) like coderl eval.",
    )
    _config_args(p)
    p.add_argument("--k", type=int, default=4, help="samples per task (default 4)")
    p.add_argument(
        "--policy", default="", help="a tag for the weights, when model.path alone does not tell them apart"
    )
    p.add_argument(
        "--bare",
        action="store_true",
        help="start from the built-in defaults instead of coderl train's packaged recipe (as coderl train --bare)",
    )
    p.set_defaults(func=_lazy("coderl.cli.eval_cmd", "run_calibrate"))
    p = tasks.add_parser(
        "synth",
        help="synthesise validated bug-fix tasks from any Python repository with a passing pytest suite",
        description="Seeded AST mutations of REPO's library code, kept when its own tests catch them (some "
        "fail, some still pass); each becomes a task in OUT_DIR (native format: OUT_DIR/repos/<name>, "
        "OUT_DIR/tasks/<name>-sNNN) whose catching tests are withheld from the agent and run only at grading. "
        "Every task is validated; drops are counted in OUT_DIR/synth-<name>.json. Use with tasks.source=native:OUT_DIR. "
        "Run again into the same OUT_DIR, it replaces that repository's earlier tasks of the same --tier (other "
        "repositories' tasks stay), so several repositories can share one suite.",
    )
    p.add_argument(
        "repo",
        help="a folder holding a Python repository with a pytest suite, or pypi:NAME[==VERSION] (its source "
        "distribution, fetched with pip)",
    )
    p.add_argument("out", help="the suite folder to write (created; a bundled-style suite)")
    _config_args(p)
    p.add_argument("--n", type=at_least(1), default=50, help="tasks wanted (default 50)")
    p.add_argument("--seed", type=int, default=0, help="seed of the mutation order (default 0)")
    p.add_argument("--tier", default="synth", help="tier of the tasks (default synth)")
    p.add_argument("--name", help="repository name in OUT_DIR/repos (default: REPO's folder name)")
    p.add_argument("--concurrency", type=at_least(1), default=2, help="sandboxes running mutants at once (default 2)")
    p.add_argument("--max-tries", type=at_least(1), help="most mutants to run (default: until --n are kept)")
    p.add_argument(
        "--timeout", type=at_least(1, float), default=60.0,
        help="seconds one test-suite run may take (default 60; the pristine suite must finish within it)",
    )  # fmt: skip
    p.add_argument(
        "--bug-in", choices=["callee", "helper"],
        help="keep only tasks whose bug lies in the function the issue text calls first (callee) or elsewhere "
        "(helper); the others are dropped as bug_elsewhere and --n counts the kept ones (default: keep both)",
    )  # fmt: skip
    p.add_argument(
        "--max-lines", type=int,
        help="mutate only functions of at most this many lines, decorators and docstring included (default: any)",
    )  # fmt: skip
    p.add_argument(
        "--no-validate", action="store_true", help="skip proving each task (faster; not for shipping)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    p.set_defaults(func=_lazy("coderl.cli.tasks_cmd", "run_tasks_synth"))

    sandbox = sub.add_parser("sandbox", help="sandbox servers").add_subparsers(
        dest="sandbox_cmd", metavar="CMD"
    )
    p = sandbox.add_parser("serve", help="serve sandboxes over HTTP for the remote backend (bearer tokens)")
    _config_args(p)
    p.set_defaults(func=_lazy("coderl.cli.sandbox_cmd", "run_sandbox_serve"))
    image = sandbox.add_parser("image", help="the docker backend's task image").add_subparsers(
        dest="image_cmd", metavar="CMD"
    )
    p = image.add_parser(
        "build",
        help="build the task image locally (Debian + Python 3 + pytest + git), tagged by its recipe's digest",
        description="debootstrap a Debian root file system (cached under the coderl cache folder) and "
        "docker import it as coderl-task:<digest>; nothing is done when the daemon already holds that tag. "
        "Prints the tag; use it as sandbox.image=TAG with sandbox.backend=docker. Needs root and a Docker daemon.",
    )
    p.add_argument("--tag", help="also tag the image TAG (the digest tag is always set)")
    p.add_argument("--rebuild", action="store_true", help="debootstrap again even where a tarball is cached")
    p.add_argument("--mirror", help="Debian mirror (default http://deb.debian.org/debian)")
    p.set_defaults(func=_lazy("coderl.cli.sandbox_cmd", "run_sandbox_image_build"))

    bench = sub.add_parser("bench", help="benchmarks behind BENCHMARKS.md").add_subparsers(
        dest="bench_cmd", metavar="WHAT"
    )
    from coderl.cli.bench_cmd import add_bench_parsers

    add_bench_parsers(bench, _config_args)
    return parser


def _lazy(module: str, attr: str) -> Handler:
    """Import the handler only when its command runs, so --help stays instant."""

    def run(ns: argparse.Namespace) -> int:
        import importlib

        handler: Handler = getattr(importlib.import_module(module), attr)
        return handler(ns)

    return run


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, letting the config file and overrides come after a command's options too
    (``coderl tasks convert OUT --format verl tasks.source=...``): argparse alone fills its trailing
    positionals before the options and refuses what follows them."""
    ns, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(ns, "overrides") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if ns.config is None and not ns.overrides and "=" not in extra[0]:
            ns.config, extra = extra[0], extra[1:]
        ns.overrides = [*ns.overrides, *extra]
    return ns


def _strict(parser: argparse.ArgumentParser) -> None:
    """No abbreviated long flags (``--bar`` ran as ``--bare``), on every parser; each group of commands
    (``coderl bench``, ``coderl tasks``...) given alone prints its own help."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if parser.prog != "coderl":
                parser.set_defaults(help_parser=parser)
            for child in action.choices.values():
                _strict(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _strict(parser)
    ns = _parse(parser, argv)
    logging.basicConfig(
        level=logging.DEBUG if ns.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(ns, "func", None):
        (getattr(ns, "help_parser", None) or parser).print_help()
        return 0 if ns.command is None else 2
    ns.config_path, ns.config_overrides = _split_config(ns) if hasattr(ns, "overrides") else (None, [])
    try:
        bound_heap()
    except ValueError as exc:
        print(f"coderl: error: {exc}", file=sys.stderr)
        return 2
    try:
        with stop_on_sigterm():
            return int(ns.func(ns))
    except CoderlError as exc:
        print(f"coderl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if terminated():
            print("coderl: terminated (SIGTERM)", file=sys.stderr)
            return 143
        print("coderl: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The ``coderl`` command (and ``python -m coderl``): :func:`main` in a process that runs on jemalloc
    where the machine has it (:mod:`coderl.allocator`; ``CODERL_ALLOCATOR=system`` keeps glibc's)."""
    try:
        allocator.preload_jemalloc()  # runs this command again, once, before torch loads
    except allocator.AllocatorError as exc:
        print(f"coderl: error: {exc}", file=sys.stderr)
        sys.exit(2)
    allocator.forget_preload()
    sys.exit(main())


if __name__ == "__main__":
    entry()
