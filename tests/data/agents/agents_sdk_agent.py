"""An agent built on the OpenAI Agents SDK with its default model class (the Responses API), for the
compatibility tests: it knows nothing of coderl, only OPENAI_BASE_URL / OPENAI_API_KEY and the task in
CODERL_TASK. One function tool runs shell commands in the repository; the SDK loops until the model
answers without a tool call (at most four turns)."""

import os
import subprocess

from agents import Agent, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)  # traces would go to api.openai.com


@function_tool
def run(command: str) -> str:
    """Run a shell command in the repository and return what it printed."""
    r = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    return (r.stdout + r.stderr)[-2000:] or f"(exit {r.returncode}, no output)"


agent = Agent(
    name="fixer",
    instructions="You fix bugs in this repository. Use the run tool, then say what you changed.",
    tools=[run],
    model=os.environ["CODERL_MODEL"],
)
result = Runner.run_sync(agent, os.environ["CODERL_TASK"], max_turns=4)
print("final:", result.final_output)
