"""The OpenAI Agents SDK through probity, the way an app uses it: an agent
with one function tool, run with `Runner.run` over the Responses API. The
`model` names the case the fake upstream answers (tests/it/sdks.rs). One JSON
line per row (rows.py)."""

import asyncio

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from rows import PROBITY, row

# No trace export: the only network is probity.
set_tracing_disabled(True)
calls = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


def run(case):
    def call():
        calls.clear()
        # One client per run: its connections belong to the run's event loop.
        client = AsyncOpenAI(base_url=f"{PROBITY}/openai/v1", api_key="unused")
        agent = Agent(
            name="weather",
            instructions="Answer with the weather.",
            tools=[get_weather],
            model=OpenAIResponsesModel(model=case, openai_client=client),
        )
        result = asyncio.run(Runner.run(agent, "What is the weather in Paris?"))
        usage = result.context_wrapper.usage
        return {
            "final": result.final_output,
            "calls": list(calls),
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        }

    return call


for case in ("agent", "agent-figure", "reject"):
    row(f"agents.{case}", run(case))
