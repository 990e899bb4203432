"""OpenAI Embeddings (`/v1/embeddings`), and the embedding task Ollama's /api/embed shares.

- request.py: the body into the embedding request (inputs, encoding, model);
- creation.py: the embedding task created through the same steps as any task (refuse while
  paused, model lookup, memory, each input within the context) and waited for;
- render.py: the `list` of `embedding` objects from the stored vectors;
- routes.py: the route.

An embedding is a task of kind `embedding` (states, cancel, restart policies, the task
list), run by the runner in the model's engine worker (core/engines/llama_embed.py).
"""
