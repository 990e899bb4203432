"""Snippets the window hands out (Connect a client, Pair a client): each runs as pasted and
does what the chosen scopes allow — a token without `responses:write` gets 403 from
`responses.create`, so its snippet lists the models instead, or says what it may do."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from lmsp_desktop.core.scopes import ADMIN, MODELS_READ, RESPONSES_READ, RESPONSES_WRITE

MODEL = "smollm2-135m-instruct"
PROMPT = "Write a haiku about tea"
# Claude Code's first request, its instructions and tools: 12,279 tokens (2.1.328) to 20,052
# (2.1.197) through the demo model's tokenizer (docs/clients-anthropic.md). Without tools
# it is about 1,500.
CLAUDE_CODE_PROMPT = 20_052
ROOMY_CONTEXT = 32_768  # what the Claude Code tab advises a model trained for more
# What the Claude Code tab gives a small model in place of Claude Code's own system prompt,
# on which the demo model loops (docs/clients-anthropic.md), and the prompt it sends it.
BRIEF = "You are a helpful assistant. Answer briefly."
CLAUDE_PROMPT = "say hi"
OUTPUT_CAP = 256  # CLAUDE_CODE_MAX_OUTPUT_TOKENS for a small model: a loop ends in seconds


@dataclass(frozen=True)
class Named:
    """The model the snippets name, with the context it runs with and the one it was trained
    for, as GET /v1/models says them (`context_length`, `trained_context_length`; None where
    unknown, as for an upstream's model that does not say)."""

    id: str = MODEL
    context: int | None = None
    trained: int | None = None


DEMO = Named()  # the demo model's name, its contexts not looked up


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
            f"reply = {client}.responses.create(\n"
            f'    model="{model}",\n'
            f'    input="{PROMPT}",\n'
            ")\n"
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
        "const client = new OpenAI({\n"
        f'  baseURL: "{base}",\n'
        f'  apiKey: "{token}",\n'
        "});\n"
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


def claude_code(root: str, token: str, needs_write: str, model: Named = DEMO) -> str:
    """Claude Code's environment and command line. `root` is the service URL without /v1:
    Claude Code adds /v1, and with a base URL ending in /v1 it prints only its own words
    for the 404 (the service's sentence about the doubled /v1 never shows). The live line
    is one the model can answer: with Claude Code's tools where its context holds their
    ~20k tokens (or would, run with more), else without tools, with a short system prompt
    and a cap on the answer (the demo model can loop on Claude Code's own and print nothing
    for minutes)."""
    head = (
        needs_write + "# The service root, without /v1: Claude Code adds /v1 itself.\n"
        f"export ANTHROPIC_BASE_URL={root}\n"
        f"export ANTHROPIC_AUTH_TOKEN={token}\n"
        "export DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\n"
        "# A CPU can take minutes over the first prompt: let Claude Code wait.\n"
        "export CLAUDE_STREAM_IDLE_TIMEOUT_MS=1800000 API_TIMEOUT_MS=1800000\n\n"
        "# Claude Code's first request holds its instructions and tools: 12,279 to 20,052\n"
        "# tokens, by version.\n"
    )
    m, runs, trained = model.id, model.context, model.trained
    with_tools = f"claude --model {m}\n"
    if runs is not None and runs > CLAUDE_CODE_PROMPT:
        return head + f"# {m} runs with {runs:,} tokens: enough.\n" + with_tools
    if trained is not None and trained > CLAUDE_CODE_PROMPT:
        now = f"runs with {runs:,} tokens" if runs else "may run with less"
        return head + (
            f"# {m} {now}; it was trained for {trained:,}. Run it with more\n"
            "# first (or in the Models page's settings), memory permitting:\n"
            f"#   lmsp-desktop models set {m} --context {min(trained, ROOMY_CONTEXT)}\n"
            + with_tools
        )
    # Without tools, with a short system prompt and a cap on the answer: a small model (the
    # demo model) can loop on Claude Code's own (~1,500 tokens) until its context is full
    # (Claude Code asks max_tokens 32000), minutes with no output; the cap bounds that.
    small = f'SYSTEM="{BRIEF}"\nexport CLAUDE_CODE_MAX_OUTPUT_TOKENS={OUTPUT_CAP}\n'
    session = f'claude --model {m} --system-prompt "$SYSTEM" --tools ""\n'
    if runs is None and trained is None:  # an upstream's model that does not say
        return head + (
            "# The model's context must hold that (else a 400 says so). A small model\n"
            "# answers without tools, with a short system prompt in place of Claude Code's\n"
            "# own and a cap on its answers (it can loop on Claude Code's own prompt):\n"
            + "".join(f"#   {line}\n" for line in (small + session).splitlines())
            + "# With tools:\n"
            + with_tools
        )
    if runs and trained and runs < trained:  # set to less (`models set … --context 4096`)
        holds = (
            f"# {m} runs with {runs:,} tokens and was trained for {trained:,}:\n"
            "# Claude Code's tools need a model trained for more.\n"
        )
    else:  # it runs with all it was trained for, or says only one of them
        holds = (
            f"# {m} holds {runs or trained or 0:,} tokens: Claude Code's tools need a "
            "model with a\n"
            "# longer context.\n"
        )
    holds += (
        "# Without tools, with a short system prompt in place of Claude Code's own and a\n"
        "# cap on its answers (a small model can loop on Claude Code's own prompt,\n"
        "# minutes with no output), it answers in seconds.\n"
    )
    one = f'# A session (for one prompt, add -p "{CLAUDE_PROMPT}" after claude):\n'
    return head + holds + small + one + session


def anthropic_python(root: str, token: str, scopes: Collection[str], model: str = MODEL) -> str:
    """The anthropic SDK. `root` is the service URL without /v1: the SDK adds it."""
    head = (
        "import anthropic\n\n"
        "# The service root, without /v1: the SDK adds it.\n"
        "client = anthropic.Anthropic(\n"
        f'    base_url="{root}",\n'
        f'    api_key="{token}",\n'
        ")\n"
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
        "# reads them from the environment:\n"
        f"#   OLLAMA_HOST={root}\n"
        f"#   OLLAMA_API_KEY={token}\n"
        f'token = "{token}"\n'
        "client = Client(\n"
        f'    host="{root}",\n'
        '    headers={"Authorization": f"Bearer {token}"},\n'
        ")\n"
    )
    if RESPONSES_WRITE in scopes:
        return head + (
            "reply = client.chat(\n"
            f'    model="{model}",\n'
            f'    messages=[{{"role": "user", "content": "{PROMPT}"}}],\n'
            ")\n"
            "print(reply.message.content)\n"
        )
    if MODELS_READ in scopes:
        return head + (
            f"# {allowed(scopes)} Tick responses:write to send prompts.\n"
            "for model in client.list().models:\n    print(model.model)\n"
        )
    return head + f'print("{allowed(scopes)}")\n'


def openai_client(base: str, key: str) -> str:
    """`client = OpenAI(...)`, a line per argument: with a token the line ran past the box."""
    return f'client = OpenAI(\n    base_url="{base}",\n    api_key={key},\n)\n'


def connect_snippets(
    base: str, token: str, scopes: Collection[str], model: Named = DEMO
) -> dict[str, str]:
    """Connect a client's snippets, by tab title, all naming `model`. `base` is the service
    URL with /v1, for OpenAI-compatible clients; Anthropic's and Ollama's take the root,
    without it. Each line fits the dialog's box at its default size, token and all."""
    root = base.removesuffix("/v1")
    writes = RESPONSES_WRITE in scopes
    needs_write = "" if writes else f"# {allowed(scopes)} This needs responses:write.\n"
    return {
        "curl": curl(base, token, scopes, model.id),
        "Python (openai)": (
            "from openai import OpenAI\n\n"
            + openai_client(base, f'"{token}"')
            + python_use(scopes, model=model.id)
        ),
        "JavaScript (openai)": javascript(base, token, scopes, model.id),
        "Codex CLI": (
            needs_write + "# ~/.codex/config.toml\n"
            f'model = "{model.id}"\n'
            'model_provider = "lmsp"\n\n'
            "[model_providers.lmsp]\n"
            'name = "LMSP Desktop"\n'
            f'base_url = "{base}"\n'
            'env_key = "LMSP_TOKEN"\n'
            'wire_api = "responses"\n\n'
            "# For a model with an 8k context (the demo model): Codex's prompt with all its\n"
            "# tools is about 9,000 tokens, without sub-agents and goals about 5,700.\n"
            "[agents]\nenabled = false\n\n[features]\ngoals = false\n\n"
            f"# then, in the shell:\n#   export LMSP_TOKEN={token}\n"
        ),
        "Claude Code": claude_code(root, token, needs_write, model),
        "Anthropic (Python)": anthropic_python(root, token, scopes, model.id),
        "Ollama": ollama_python(root, token, scopes, model.id),
        "LangChain": (
            needs_write + "from langchain_openai import ChatOpenAI\n\n"
            "llm = ChatOpenAI(\n"
            f'    base_url="{base}",\n'
            f'    api_key="{token}",\n'
            f'    model="{model.id}",\n'
            ")\n"
            f'print(llm.invoke("{PROMPT}").content)\n'
        ),
        "Chat apps": (
            needs_write + "In a chat front end's OpenAI-compatible provider settings:\n\n"
            f"Base URL: {base}\nAPI key:  {token}\nModel:    {model.id}\n"
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
        + openai_client(f"{url}/v1", "token")
        + python_use(scopes, model=model)
    )
