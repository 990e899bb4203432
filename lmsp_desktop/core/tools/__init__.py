"""Function tools and structured output: request fields, prompts, output grammars, and the
parser that turns the model's text into function calls."""
