"""Real model providers: the OpenAI-compatible agent and client, retries, the LLM judge's
prompt and verdict, and pricing. Pure: no pytest; the `openai` SDK only when used."""
