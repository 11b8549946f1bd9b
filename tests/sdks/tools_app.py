"""Tool calls through probity with each SDK's own tool helpers, the way an
agent uses them (tests/it/sdk_tools.rs): openai `chat.completions.parse` with
a pydantic tool and `create(tools=...)`, `responses.parse` and
`responses.stream` with a pydantic tool and a plain one, anthropic
`messages.stream` with a tool, ollama `chat(tools=...)`. The `model` names the case the fake
upstream answers. One JSON line per row (rows.py)."""

from typing import Literal, Optional

import anthropic
import ollama
import openai
import pydantic

from rows import MESSAGES, PROBITY, row


class GetWeather(pydantic.BaseModel):
    """Get the current weather in a city."""

    city: str
    unit: Optional[Literal["celsius", "fahrenheit"]]


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}
OPENAI_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}

chat = openai.OpenAI(base_url=f"{PROBITY}/openai/v1", api_key="unused")
claude = anthropic.Anthropic(base_url=f"{PROBITY}/anthropic", api_key="unused")
llama = ollama.Client(host=f"{PROBITY}/ollama")


def openai_parse(case):
    def call():
        done = chat.chat.completions.parse(
            model=case, messages=MESSAGES, tools=[openai.pydantic_function_tool(GetWeather, name="get_weather")]
        )
        tool = done.choices[0].message.tool_calls[0].function
        return {"name": tool.name, "parsed": tool.parsed_arguments.model_dump()}

    return call


def openai_raw(case):
    def call():
        raw = chat.chat.completions.with_raw_response.create(
            model=case, messages=MESSAGES, tools=[OPENAI_TOOL]
        )
        tool = raw.parse().choices[0].message.tool_calls[0].function
        return {
            "name": tool.name,
            "arguments": tool.arguments,
            "output": raw.headers.get("probity-output"),
            "reason": raw.headers.get("probity-output-reason"),
        }

    return call


def openai_stream(case):
    def call():
        name, arguments = None, ""
        for chunk in chat.chat.completions.create(
            model=case, messages=MESSAGES, tools=[OPENAI_TOOL], stream=True
        ):
            for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                name = name or delta.function.name
                arguments += delta.function.arguments or ""
        return {"name": name, "arguments": arguments}

    return call


RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": SCHEMA}


def responses_parse(case, stream=False):
    """The Responses API with a pydantic tool: the SDK parses the call's
    arguments into the model (`parsed_arguments`)."""

    def call():
        tool = openai.pydantic_responses_function_tool(GetWeather, name="get_weather")
        if stream:
            with chat.responses.stream(model=case, input="Weather in Paris?", tools=[tool]) as events:
                done = events.get_final_response()
        else:
            done = chat.responses.parse(model=case, input="Weather in Paris?", tools=[tool])
        item = next(i for i in done.output if i.type == "function_call")
        return {"name": item.name, "parsed": item.parsed_arguments.model_dump()}

    return call


def responses_stream(case):
    """A streamed Responses call with a plain tool: the app reads the
    final response's call and the deltas as they came."""

    def call():
        deltas = ""
        with chat.responses.stream(model=case, input="Weather in Paris?", tools=[RESPONSES_TOOL]) as events:
            for event in events:
                if event.type == "response.function_call_arguments.delta":
                    deltas += event.delta
            done = events.get_final_response()
        item = next(i for i in done.output if i.type == "function_call")
        return {"name": item.name, "arguments": item.arguments, "deltas": deltas}

    return call


ANTHROPIC_TOOL = {"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}


def anthropic_stream(case):
    def call():
        with claude.messages.stream(
            model=case, max_tokens=1024, messages=MESSAGES, tools=[ANTHROPIC_TOOL]
        ) as stream:
            final = stream.get_final_message()
        block = next(b for b in final.content if b.type == "tool_use")
        return {"name": block.name, "input": block.input}

    return call


def anthropic_raw(case):
    def call():
        raw = claude.messages.with_raw_response.create(
            model=case, max_tokens=1024, messages=MESSAGES, tools=[ANTHROPIC_TOOL]
        )
        block = next(b for b in raw.parse().content if b.type == "tool_use")
        return {
            "name": block.name,
            "input": block.input,
            "output": raw.headers.get("probity-output"),
            "reason": raw.headers.get("probity-output-reason"),
        }

    return call


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
      city: The city
      unit: celsius or fahrenheit
    """
    return f"sunny in {city}"


def ollama_chat(case, stream=False):
    def call():
        if stream:
            calls = []
            for part in llama.chat(model=case, messages=MESSAGES, tools=[get_weather], stream=True):
                calls += part.message.tool_calls or []
        else:
            calls = llama.chat(model=case, messages=MESSAGES, tools=[get_weather]).message.tool_calls
        return {"name": calls[0].function.name, "arguments": dict(calls[0].function.arguments)}

    return call


row("openai.parse.valid", openai_parse("valid"))
row("openai.create.cut", openai_raw("cut"))
row("openai.stream.unknown", openai_stream("unknown"))
row("responses.parse.valid", responses_parse("valid"))
row("responses.stream.valid", responses_parse("valid", stream=True))
row("responses.stream.cut", responses_stream("cut"))
row("responses.stream.unknown", responses_stream("unknown"))
row("anthropic.stream.valid", anthropic_stream("valid"))
row("anthropic.stream.schema", anthropic_stream("schema"))
row("anthropic.create.unknown", anthropic_raw("unknown"))
row("ollama.chat.valid", ollama_chat("valid"))
row("ollama.chat.schema", ollama_chat("schema"))
row("ollama.stream.unknown", ollama_chat("unknown", stream=True))
