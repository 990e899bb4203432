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


def claude_code(root: str, token: str, needs_write: str, model: str = MODEL) -> str:
    """Claude Code's environment and command line. `root` is the service URL without /v1:
    Claude Code adds /v1, and with a base URL ending in /v1 it prints only its own words
    for the 404 (the service's sentence about the doubled /v1 never shows)."""
    return (
        needs_write + "# The service root, without /v1: Claude Code adds /v1 itself.\n"
        f"export ANTHROPIC_BASE_URL={root}\n"
        f"export ANTHROPIC_AUTH_TOKEN={token}\n"
        "export DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n"
        "# A CPU can take minutes over the first prompt: let Claude Code wait.\n"
        "export CLAUDE_STREAM_IDLE_TIMEOUT_MS=1800000 API_TIMEOUT_MS=1800000\n\n"
        "# Claude Code's first request holds its instructions and tools: 12,279 to 20,052\n"
        "# tokens, by version. The model's context must hold that (else a 400 says so):\n"
        f"#   lmsp-desktop models set {model} --context 32768\n"
        "# Without tools it fits the demo model's 8k (about 1,500 tokens):\n"
        f'#   claude -p "say hi" --model {model} --tools ""\n'
        f"claude --model {model}\n"
    )


def anthropic_python(root: str, token: str, scopes: Collection[str], model: str = MODEL) -> str:
    """The anthropic SDK. `root` is the service URL without /v1: the SDK adds it."""
    head = (
        "import anthropic\n\n"
        "# The service root, without /v1: the SDK adds it.\n"
        f'client = anthropic.Anthropic(base_url="{root}", api_key="{token}")\n'
    )
    if RESPONSES_WRITE in scopes:
        return head + (
            "message = client.messages.create(\n"
            f'    model="{model}",\n'
            "    max_tokens=64,\n"
            f'    messages=[{{"role": "user", "content": "{PROMPT}"}}],\n'
            ")\n"
            "print(message.content[0].text)\n"
        )
    if MODELS_READ in scopes:
        return head + (
            f"# {allowed(scopes)} Tick responses:write to send prompts.\n"
            "for model in client.models.list():\n    print(model.id)\n"
        )
    return head + f'print("{allowed(scopes)}")\n'


def ollama_python(root: str, token: str, scopes: Collection[str], model: str = MODEL) -> str:
    """ollama-python, and where other Ollama clients take the same URL and token."""
    head = (
        "from ollama import Client\n\n"
        "# The service root, without /v1 (Ollama's routes are under /api). Open WebUI and\n"
        "# Continue take the same URL with the token as a Bearer token. ollama-python also\n"
        f"# reads them from the environment: OLLAMA_HOST={root} OLLAMA_API_KEY={token}\n"
        f'client = Client(host="{root}", headers={{"Authorization": "Bearer {token}"}})\n'
    )
    if RESPONSES_WRITE in scopes:
        return head + (
            f'reply = client.chat(model="{model}", '
            f'messages=[{{"role": "user", "content": "{PROMPT}"}}])\n'
            "print(reply.message.content)\n"
        )
    if MODELS_READ in scopes:
        return head + (
            f"# {allowed(scopes)} Tick responses:write to send prompts.\n"
            "for model in client.list().models:\n    print(model.model)\n"
        )
    return head + f'print("{allowed(scopes)}")\n'


def connect_snippets(
    base: str, token: str, scopes: Collection[str], model: str = MODEL
) -> dict[str, str]:
    """Connect a client's snippets, by tab title. `base` is the service URL with /v1, for
    OpenAI-compatible clients; Anthropic's and Ollama's take the root, without it."""
    root = base.removesuffix("/v1")
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
        "Claude Code": claude_code(root, token, needs_write, model),
        "Anthropic (Python)": anthropic_python(root, token, scopes, model),
        "Ollama": ollama_python(root, token, scopes, model),
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
