"""Snippets the window hands out (Connect a client, Pair a client): each runs as pasted and
does what the chosen scopes allow — a token without `responses:write` gets 403 from
`responses.create`, so its snippet lists the models instead, or says what it may do."""

from __future__ import annotations

from collections.abc import Collection

from lmsp_desktop.core.scopes import ADMIN, MODELS_READ, RESPONSES_READ, RESPONSES_WRITE

MODEL = "smollm2-135m-instruct"
PROMPT = "Write a haiku about tea"


def allowed(scopes: Collection[str]) -> str:
    """What a token with `scopes` may do, in a sentence (a snippet's comment)."""
    can = {
        RESPONSES_WRITE: "create responses",
        RESPONSES_READ: "read its responses by id",
        MODELS_READ: "list the models",
        ADMIN: "manage clients and settings",
    }
    done = [words for scope, words in can.items() if scope in scopes]
    return "This token may " + (", ".join(done) if done else "do nothing") + "."


def python_use(scopes: Collection[str], client: str = "client", model: str = MODEL) -> str:
    """The lines after a `client = OpenAI(...)`: the strongest thing `scopes` allow."""
    if RESPONSES_WRITE in scopes:
        return (
            f'reply = {client}.responses.create(model="{model}", input="{PROMPT}")\n'
            "print(reply.output_text)\n"
        )
    if MODELS_READ in scopes:
        return (
            f"# {allowed(scopes)} Tick responses:write to send prompts.\n"
            f"for model in {client}.models.list():\n    print(model.id)\n"
        )
    return f'print("{allowed(scopes)}")\n'


def curl(base: str, token: str, scopes: Collection[str], model: str = MODEL) -> str:
    """`base` is the service URL with /v1. -s: no progress meter around the answer."""
    auth = f'  -H "Authorization: Bearer {token}"'
    if RESPONSES_WRITE in scopes:
        return (
            f"curl -s {base}/responses \\\n{auth} \\\n"
            '  -H "Content-Type: application/json" \\\n'
            f'  -d \'{{"model": "{model}", "input": "{PROMPT}"}}\'\n'
        )
    if MODELS_READ in scopes:
        return f"# {allowed(scopes)}\ncurl -s {base}/models \\\n{auth}\n"
    return f"# {allowed(scopes)}\n"


def javascript(base: str, token: str, scopes: Collection[str], model: str = MODEL) -> str:
    head = (
        'import OpenAI from "openai";\n\n'
        f'const client = new OpenAI({{ baseURL: "{base}", apiKey: "{token}" }});\n'
    )
    if RESPONSES_WRITE in scopes:
        return head + (
            "const reply = await client.responses.create({\n"
            f'  model: "{model}",\n  input: "{PROMPT}",\n}});\n'
            "console.log(reply.output_text);\n"
        )
    if MODELS_READ in scopes:
        return head + (
            f"// {allowed(scopes)}\n"
            "for await (const model of client.models.list()) console.log(model.id);\n"
        )
    return head + f'console.log("{allowed(scopes)}");\n'


def connect_snippets(
    base: str, token: str, scopes: Collection[str], model: str = MODEL
) -> dict[str, str]:
    """Connect a client's snippets, by tab title. `base` is the service URL with /v1."""
    writes = RESPONSES_WRITE in scopes
    needs_write = "" if writes else f"# {allowed(scopes)} This needs responses:write.\n"
    return {
        "curl": curl(base, token, scopes, model),
        "Python (openai)": (
            "from openai import OpenAI\n\n"
            f'client = OpenAI(base_url="{base}", api_key="{token}")\n'
            + python_use(scopes, model=model)
        ),
        "JavaScript (openai)": javascript(base, token, scopes, model),
        "Codex CLI": (
            needs_write + "# ~/.codex/config.toml\n"
            f'model = "{model}"\n'
            'model_provider = "lmsp"\n\n'
            "[model_providers.lmsp]\n"
            'name = "LMSP Desktop"\n'
            f'base_url = "{base}"\n'
            'env_key = "LMSP_TOKEN"\n'
            'wire_api = "responses"\n\n'
            "# For a model with an 8k context (the demo model): Codex's prompt with all its\n"
            "# tools is about 9,000 tokens, without sub-agents and goals about 5,700.\n"
            "[agents]\nenabled = false\n\n[features]\ngoals = false\n\n"
            f"# then, in the shell: export LMSP_TOKEN={token}\n"
        ),
        "LangChain": (
            needs_write + "from langchain_openai import ChatOpenAI\n\n"
            f'llm = ChatOpenAI(base_url="{base}", api_key="{token}", model="{model}")\n'
            f'print(llm.invoke("{PROMPT}").content)\n'
        ),
        "Chat apps": (
            needs_write + "In a chat front end's OpenAI-compatible provider settings:\n\n"
            f"Base URL: {base}\nAPI key:  {token}\nModel:    {model}\n"
        ),
    }


def pair_python(url: str, code: str, scopes: Collection[str], model: str = MODEL) -> str:
    """Claim the one-time code for a token, then use it. Only the standard library and the
    `openai` package (which no longer brings httpx along)."""
    return (
        "import json, urllib.request\n"
        "from openai import OpenAI\n\n"
        "claim = urllib.request.Request(\n"
        f'    "{url}/v1/pairing/claim",\n'
        f'    data=json.dumps({{"code": "{code}", "client_name": "my-script"}}).encode(),\n'
        '    headers={"Content-Type": "application/json"},\n'
        ")\n"
        "with urllib.request.urlopen(claim) as answer:\n"
        '    token = json.load(answer)["access_token"]\n'
        "# Keep the token somewhere safe: it is shown only once.\n"
        f'client = OpenAI(base_url="{url}/v1", api_key=token)\n' + python_use(scopes, model=model)
    )
