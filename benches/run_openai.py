"""The peer of `cargo bench --bench run`: a Python asyncio runner using the
official `openai` AsyncOpenAI client, with the same concurrency per tier,
against the same serve-sim endpoint: every prompt to both tiers, streaming
with usage, as routeval does. Prints requests, seconds and requests/s."""

import asyncio
import json
import sys
import time

from openai import AsyncOpenAI


async def main(base_url, dataset, concurrency):
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=4)
    prompts = [json.loads(line)["prompt"] for line in open(dataset)]
    limits = {tier: asyncio.Semaphore(concurrency) for tier in ("small", "large")}
    models = {"small": "sim-small-2026-11-01", "large": "sim-large-2026-11-01"}
    rows = []

    async def call(tier, prompt):
        async with limits[tier]:
            stream = await client.chat.completions.create(
                model=models[tier],
                messages=[{"role": "user", "content": prompt}],
                temperature=0,
                max_completion_tokens=256,
                seed=7,
                stream=True,
                stream_options={"include_usage": True},
            )
            text, finish, usage = [], None, None
            async for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta.content:
                        text.append(choice.delta.content)
                    finish = choice.finish_reason or finish
                usage = chunk.usage or usage
            rows.append((tier, "".join(text), finish, usage))

    started = time.perf_counter()
    # Bounded in-flight work, as routeval keeps it, so memory stays flat.
    queue = asyncio.Queue(maxsize=4 * concurrency)

    async def worker():
        while True:
            item = await queue.get()
            if item is None:
                return
            await call(*item)

    workers = [asyncio.create_task(worker()) for _ in range(2 * concurrency)]
    for prompt in prompts:
        for tier in ("small", "large"):
            await queue.put((tier, prompt))
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - started
    print(json.dumps({"requests": len(rows), "seconds": elapsed, "rps": len(rows) / elapsed}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
