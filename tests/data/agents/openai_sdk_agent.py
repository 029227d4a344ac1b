"""A small agent program for the remote loop's tests: it knows nothing of coderl, only the OpenAI SDK
and the environment variables any OpenAI-compatible agent reads. Two model turns (the second sees the
first reply and a tool result), one call of a "sub-agent" with a conversation of its own (a summary),
then it applies its fix to calc.py and exits."""

import os
from pathlib import Path

from openai import OpenAI

client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
messages = [
    {"role": "system", "content": "You fix bugs. Answer with one shell command."},
    {"role": "user", "content": os.environ["CODERL_TASK"]},
]
for turn in range(2):
    reply = client.chat.completions.create(
        model=os.environ["CODERL_MODEL"], messages=messages, max_tokens=12, temperature=1.0
    )
    messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    messages.append({"role": "user", "content": f"output of command {turn}: ok"})
summary = client.chat.completions.create(
    model=os.environ["CODERL_MODEL"],
    messages=[{"role": "user", "content": "Summarise in five words: " + messages[2]["content"]}],
    max_tokens=8,
)
calc = Path("calc.py")
calc.write_text(calc.read_text().replace("a - b", "a + b"))
print("done after", len(messages) // 2 - 1, "model turns")
