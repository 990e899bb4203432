"""Models from the Hugging Face hub, fetched as durable download tasks into its cache."""
