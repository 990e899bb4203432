"""What a user sees of a `serve --max-context N` run besides the answers: `models list`
run beside it shows the context the running service uses (the flag, not the stored
setting it would otherwise read), and a prompt too long for the capped context is told to
raise the cap, not to `models set --context`, which the cap clamps (review of 46763e6),
and, once the model's own setting is at the cap too, to change both; the cap named as the
run's flag, not Settings' Max context, which cannot move it while the flag is given."""

from __future__ import annotations

from pathlib import Path

from tests.integration.serve_process import ServeProcess, call, create_token, lmsp

DEMO = "smollm2-135m-instruct"  # trained for 8,192 tokens


def demo_row(listing: str) -> list[str]:
    return next(line.split() for line in listing.splitlines() if line.startswith(DEMO))


def test_models_list_and_the_too_long_hint_follow_the_running_services_cap(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    token = create_token(data)
    process = ServeProcess(data, "--max-context", "2048")
    process.start()
    try:
        listed = lmsp("models", "list", data_dir=data)
        assert listed.returncode == 0, listed.stderr
        # NAME SOURCE STATE CONTEXT (setting) ...: what the running service loads it with.
        assert demo_row(listed.stdout)[3:5] == ["2048", "(auto)"], listed.stdout
        assert "started with --max-context 2048" in listed.stderr, listed.stderr
        _status, served = call(f"{process.url}/v1/models/{DEMO}", token)
        assert served["context_length"] == 2048  # the same figure as the service's own

        body = {"model": DEMO, "input": "word " * 2500, "max_output_tokens": 8}
        status, refused = call(f"{process.url}/v1/responses", token, "POST", body)
        assert status == 400, refused
        message = refused["error"]["message"]
        assert refused["error"]["code"] == "context_length_exceeded", refused
        assert "maximum context length is 2048 tokens" in message, message
        # The flag holds it, not Settings: raising Max context there cannot help this run.
        assert "this run's `--max-context 2048` caps every model at 2048" in message, message
        assert "again with `--max-context 4096` or more" in message, message
        assert "raise Max context" not in message, message
        assert "models set" not in message, message  # clamped by the cap: it would not help
        # One message: no older turn for `truncation: "auto"` to drop, so not offered
        # (test_api_wording_and_root.py: offered with older turns).
        assert "truncation" not in message, message
        # Anthropic's and Ollama's clients cannot send `truncation`: not suggested to them
        # (Claude Code's user, told to, sent it to /v1/messages and got the same 400).
        words = [{"role": "user", "content": "word " * 2500}]
        status, refused = call(
            f"{process.url}/v1/messages",
            token,
            "POST",
            {"model": DEMO, "max_tokens": 8, "messages": words},
        )
        assert status == 400 and refused["type"] == "error", refused
        told = refused["error"]["message"]
        assert "maximum context length is 2048 tokens" in told and "truncation" not in told, told
        assert "shorten the input" in told and "--max-context 4096" in told, told
        # (Ollama's chat cuts a too-long input unless `truncate` is false, as Ollama's.)
        ollama_body = {"model": DEMO, "messages": words, "truncate": False}
        status, refused = call(f"{process.url}/api/chat", token, "POST", ollama_body)
        assert status == 400 and "truncation" not in refused["error"], refused

        # The model's own setting at the cap too: raising the cap alone would leave the
        # model at 2048, so the hint names both (review finding 7 on 106f460).
        done = lmsp("models", "set", DEMO, "--context", "2048", data_dir=data)
        assert done.returncode == 0, done.stderr
        status, refused = call(f"{process.url}/v1/responses", token, "POST", body)
        assert status == 400, refused
        message = refused["error"]["message"]
        assert (
            "its own context setting is 2048 and this run's `--max-context 2048` caps every "
            "model at 2048" in message
        ), message
        assert f"`lmsp-desktop models set {DEMO} --context 4096`" in message, message
        assert "--max-context 4096" in message, message
    finally:
        process.terminate()
    # No service runs: the stored settings are what the next start uses.
    listed = lmsp("models", "list", data_dir=data)
    assert demo_row(listed.stdout)[3:5] == ["2048", "(2048)"], listed.stdout
    assert "--max-context" not in listed.stderr
