"""Writes prompts.jsonl: the demo data set, a support assistant's labelled
prompts in five slices, each with a reference answer, the rubric that grades
it, and a difficulty in [0, 1] (how likely a model of a given skill answers
it; the simulated endpoint uses it).

Run `python3 datasets/demo/generate.py`; it is deterministic. With
`--seed S --scale K --out FILE` it draws K times as many prompts of the same
population from other seeds: new traffic for the same signed config (the
tests serve such prompts).
"""

import argparse
import json
import pathlib
import random

arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
arguments.add_argument("--seed", type=int, default=6)
arguments.add_argument("--scale", type=int, default=1)
arguments.add_argument("--out", type=pathlib.Path)
options = arguments.parse_args()
scale = options.scale

rng = random.Random(options.seed)
# Who wrote in, from a generator of its own so the draws above stay as they
# were: every prompt is a distinct text, as real traffic is, even where two
# customers ask the same question.
senders = random.Random(options.seed + 1)
names = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ines", "Jon"]
tickets = senders.sample(range(10000, 100000), 300 * scale)
rows = []


def add(slice_name, index, prompt, reference, rubric, difficulty):
    sender = f"From {senders.choice(names)}, ticket T-{tickets[len(rows)]}: "
    rows.append({
        "id": f"{slice_name}-{index:03d}",
        "slice": slice_name,
        "prompt": sender + prompt,
        "reference": reference,
        "rubric": rubric,
        "difficulty": round(difficulty, 3),
    })


# billing: refund and billing timelines, graded by the final number.
plans = ["Starter", "Team", "Business", "Enterprise"]
methods = {"card": 5, "bank transfer": 7, "PayPal": 3, "store credit": 1}
for index in range(70 * scale):
    method, days = rng.choice(list(methods.items()))
    plan = rng.choice(plans)
    extra = rng.random()
    prompt = (
        f"I cancelled my {plan} plan and was promised a refund to my {method}. "
        f"Our policy: card refunds take 5 business days, bank transfers 7, PayPal 3 and store credit 1. "
        f"How many business days until the refund arrives? End with the number."
    )
    add("billing", index, prompt, str(days), "support-days", 0.25 + 0.4 * extra)

# account: password and access help; the answer must point to a reset link.
devices = ["phone", "laptop", "tablet", "work computer"]
for index in range(60 * scale):
    device = rng.choice(devices)
    locked = rng.random() < 0.5
    prompt = (
        f"I can't log in on my {device}"
        + (" and my account is now locked after too many attempts" if locked else "")
        + ". What should I do?"
    )
    reference = "Use the reset link we email you to set a new password" + (" once the 30-minute lock ends." if locked else ".")
    add("account", index, prompt, reference, "support-reset-link", 0.15 + 0.35 * rng.random() + (0.2 if locked else 0.0))

# orders: extract the order as JSON.
statuses = ["shipped", "processing", "delivered", "cancelled"]
for index in range(60 * scale):
    order_id = f"ORD-{rng.randint(10000, 99999)}"
    status = rng.choice(statuses)
    prompt = (
        f"Customer message: 'Hi, checking on {order_id}, the tracking page says {status}.' "
        f"Reply only with JSON: {{\"order_id\": string, \"status\": one of {statuses}}}."
    )
    reference = json.dumps({"order_id": order_id, "status": status})
    add("orders", index, prompt, reference, "support-order-json", 0.3 + 0.45 * rng.random())

# triage: route a ticket to a team, multiple choice.
triage_tickets = [
    ("My invoice shows a charge twice this month.", "A"),
    ("The app crashes when I open settings.", "B"),
    ("I want to delete all my personal data.", "C"),
    ("Can I upgrade to the Business plan mid-cycle?", "D"),
    ("Your API returns 500 errors since this morning.", "B"),
    ("I was charged after cancelling.", "A"),
    ("Please send me a copy of the data you hold on me.", "C"),
    ("Which plan includes single sign-on?", "D"),
]
for index in range(60 * scale):
    ticket, answer = rng.choice(triage_tickets)
    prompt = (
        f"Ticket: \"{ticket}\"\nWhich team should handle it?\n"
        "A. Billing\nB. Engineering\nC. Privacy\nD. Sales\nAnswer with the letter."
    )
    add("triage", index, prompt, answer, "support-triage", 0.2 + 0.5 * rng.random())

# policy: yes-or-no questions about the terms, exact answers; the hardest slice.
questions = [
    ("Can a Team plan be refunded after 45 days?", "no"),
    ("Do Enterprise contracts include a data processing agreement?", "yes"),
    ("May customers in the EU ask for their data to be stored in the EU?", "yes"),
    ("Are annual plans refundable pro rata after the first month?", "no"),
    ("Can a Starter plan add single sign-on?", "no"),
    ("Is the uptime guarantee 99.9% for Business plans?", "yes"),
]
for index in range(50 * scale):
    question, answer = rng.choice(questions)
    prompt = f"Answer yes or no, one word, according to our terms of service: {question}"
    add("policy", index, prompt, answer, "exact", 0.45 + 0.5 * rng.random())

out = options.out or pathlib.Path(__file__).with_name("prompts.jsonl")
with out.open("w") as file:
    for row in rows:
        file.write(json.dumps(row) + "\n")
print(f"{len(rows)} prompts written to {out}")
