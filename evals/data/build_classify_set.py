# ruff: noqa: E501  (prompt text reads better unbroken)
"""Write ``evals/data/classify_set.jsonl``: the labelled corpus of the task classifier.

    python -m evals.data.build_classify_set [--seed 14] [--per-template 9]

Every prompt is generated here, from templates written for this repository filled with the
slot values of ``classify_pools.py``, with a seeded ``random.Random`` (same seed, same
file). Each line: ``{"id", "task", "split", "template", "text"}`` plus, for the shapes the
rules decide, ``tools`` or ``response_format``. The split is by *template*: every fifth
template of a class (and every prompt made from it) is ``test``, never trained on, so the
held-out figure measures phrasings the model has not seen, not new slot values in a seen
sentence. ``classify_natural.jsonl`` (written by hand, also never trained on) holds
prompts phrased the way people write them, the issue's 32-style set.
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.data import classify_pools as P

OUT = Path(__file__).with_name("classify_set.jsonl")
Slot = Callable[[random.Random], str]


def _pick(values: tuple[str, ...]) -> Slot:
    return lambda rng: rng.choice(values)


def _text(rng: random.Random, lo: int = 3, hi: int = 8) -> str:
    _, sentences = rng.choice(P.DOMAINS)
    k = rng.randint(lo, min(hi, len(sentences)))
    return " ".join(rng.sample(sentences, k))


def _doc(rng: random.Random) -> str:
    """Any document: prose of a domain, or one of the fact-dense texts (both classes use it)."""
    pools = (P.PEOPLE_TEXT, P.CONTACT_TEXT, P.INVOICE_TEXT, P.EVENT_TEXT)
    if rng.random() < 0.5:
        return _text(rng, 3, 6)
    return rng.choice(rng.choice(pools))


def _long_text(rng: random.Random) -> str:
    parts = [_doc(rng) if rng.random() < 0.3 else _text(rng, 4, 8)]
    parts += [_text(rng, 4, 8) for _ in range(rng.randint(0, 3))]
    return "\n\n".join(parts)


def _longer(rng: random.Random) -> str:
    """A report of several pages' worth (3-8 KB): the instruction is far from the middle."""
    return "\n\n".join(_text(rng, 5, 8) for _ in range(rng.randint(6, 14)))


def _snippet(rng: random.Random) -> str:
    s = rng.choice(P.SNIPPETS)
    return f"```\n{s}\n```" if rng.random() < 0.5 else s


def _num(lo: int, hi: int) -> Slot:
    return lambda rng: str(rng.randint(lo, hi))


SLOTS: dict[str, Slot] = {
    "lang": _pick(P.LANGS),
    "lang2": _pick(P.LANGS),
    "ftask": _pick(P.FUNC_TASKS),
    "algo": _pick(P.ALGOS),
    "howto": _pick(P.HOWTOS),
    "err": _pick(P.ERRORS),
    "tool": _pick(P.TOOLS_DEV),
    "sql": _pick(P.SQL_TASKS),
    "react": _pick(P.REACT_QS),
    "snippet": _snippet,
    "concept": _pick(P.CONCEPTS),
    "concept2": _pick(P.CONCEPTS),
    "short": lambda rng: _text(rng, 2, 4),
    "longer": _longer,
    "fr": _pick(P.CODE_FR),
    "de": _pick(P.CODE_DE),
    "es": _pick(P.CODE_ES),
    "name": _pick(P.NAMES),
    "name2": _pick(P.NAMES),
    "item": _pick(P.ITEMS),
    "city": _pick(P.CITIES),
    "city2": _pick(P.CITIES),
    "topic": _pick(P.TOPICS),
    "book": _pick(P.BOOKS),
    "text": _text,
    "long": _long_text,
    "people": _pick(P.PEOPLE_TEXT),
    "contact": _pick(P.CONTACT_TEXT),
    "invoice": _pick(P.INVOICE_TEXT),
    "event": _pick(P.EVENT_TEXT),
    "doc": _doc,
    "a": _num(2, 60),
    "b": _num(2, 60),
    "c": _num(2, 12),
    "n": _num(2, 6),
    "speed": _num(40, 120),
    "speed2": _num(40, 120),
    "pct": _num(5, 60),
    "year": _num(1950, 2020),
}

CODE = (
    "How fast is {algo} in the worst case?",
    "Big-O of {algo}?",
    "When would I pick {algo} over a hash map?",
    "Teach me {algo} with a small example in {lang}.",
    "Kannst du mir {algo} in {lang} erklären?",
    "Wie behebe ich den Fehler '{err}'?",
    "Schreib mir ein {lang}-Skript, {de}.",
    "Why is {concept} useful in {lang}? Show code.",
    "When should I use {concept} instead of {concept2} in {lang}?",
    "Explain {concept} in {lang} like I'm new to programming.",
    "Is {concept} thread-safe in {lang}?",
    "My {lang} app crashes with {err}. Any idea why?",
    "{err} after upgrading {tool}, what changed?",
    "Getting '{err}' on this line: {snippet}",
    "how to fix {err}",
    "{lang}: {concept} vs {concept2}?",
    "Comment est-ce que je peux {howto} en {lang} ?",
    "Wie kann ich in {lang} {concept} benutzen?",
    "¿Qué diferencia hay entre {concept} y {concept2} en {lang}?",
    "¿Por qué falla este código? {snippet}",
    "Pourquoi ce code plante-t-il ? {snippet}",
    "Warum bekomme ich '{err}' in {lang}?",
    "Write a regex that extracts hashtags from a tweet.",
    "What's a good pattern for validating phone numbers with a regex?",
    "How do I reverse a linked list without extra memory?",
    "what is a race condition and how do I avoid one",
    "Write a function to check if a string is a palindrome.",
    "Why does my API return 500 when the body is empty?",
    "How can I parse command-line arguments in {lang}?",
    "Write a script to rename all .jpeg files in a folder to .jpg.",
    "What is the time complexity of {algo}?",
    "Help me write a regex for UK postcodes.",
    "My unit test passes locally but fails in CI with '{err}'.",
    "How do I paginate results in a REST API?",
    "Write a query to find duplicate emails in the users table.",
    "How do I make a POST request with fetch and a JSON body?",
    "Create a class hierarchy for shapes with an area method.",
    "Optimise this: {snippet}",
    "What's the idiomatic way to handle errors in Go?",
    "How do I install a package from a private git repo with pip?",
    "what's the best way to {howto} in {lang}",
    "getting '{err}' in prod, what does it mean",
    "Can you write me a {lang} script that {ftask}?",
    "How do I write a CSS grid with three columns?",
    "Why is my {lang} loop so slow?\n{snippet}",
    "Explain recursion using {algo} as the example.",
    "Write the HTML and JavaScript for a button that toggles dark mode.",
    "How do I undo my last git commit but keep the changes?",
    "Make this function handle empty input: {snippet}",
    "What does this regex do: ^[a-z0-9_-]{{3,16}}$",
    "Set up a REST endpoint in {lang} that returns a list of users as JSON.",
    "I want a {lang} program that {ftask}. Where do I start?",
    "Which {lang} library should I use to {howto}?",
    "How do I deploy a Flask app with {tool}?",
    "Write a Dockerfile for a {lang} service.",
    "Can you find the off-by-one error? {snippet}",
    "Write a {lang} function that {ftask}.",
    "Implement {algo} in {lang}.",
    "How do I {howto} in {lang}?",
    "Why does this crash?\n{snippet}",
    "What's wrong with this code?\n{snippet}",
    "Explain what this does, line by line:\n{snippet}",
    "Write a SQL query that {sql}.",
    "In React, how do I {react}?",
    "Convert this to {lang2}:\n{snippet}",
    "My {tool} build fails with '{err}'. What should I check?",
    "I get '{err}' when I run my {lang} program. How do I fix it?",
    "Can you review this and suggest improvements?\n{snippet}",
    "need a {lang} snippet that {ftask}, quick pls",
    "Refactor this to be more idiomatic {lang}: {snippet}",
    "Write unit tests in {lang} for a function that {ftask}.",
    "What's the difference between an interface and an abstract class in {lang}?",
    "Give me a regular expression that matches dates like 2024-03-01.",
    "Write a bash script that backs up a folder every night and keeps seven copies.",
    "Écris une fonction {lang} {fr}.",
    "Schreibe eine {lang}-Funktion, {de}.",
    "¿Cómo puedo {es} en {lang}?",
    "How would you design the database schema for a library app?",
    "Is it better to use a list or a set for membership checks in {lang}, and why?",
    "This query is slow on a table with 10M rows, how can I speed it up? {snippet}",
    "Add type hints and a docstring to this:\n{snippet}",
    "Show me how to {howto} in {lang} with an example.",
    "How can I make this {lang} function faster? It {ftask}.",
    "What does the {tool} error '{err}' mean?",
    "Translate this {lang} code into {lang2} and keep the same behaviour: {snippet}",
    "Write a {lang} class for {algo} with tests.",
)
REASONING = (
    "Un coche recorre {a}0 km en {c} horas. ¿Cuál es su velocidad media? Explica el razonamiento.",
    "Si {name} tiene {a} años y su padre el triple, ¿cuántos años tendrá el padre cuando {name} tenga {b}?",
    "If a dozen eggs cost {a} cents, how much do {c} eggs cost? Explain.",
    "Every day the number of lily pads doubles; the pond is full on day {a}. When was it half full?",
    "{name} is {c} years older than her brother; in {n} years she will be twice his age. How old are they?",
    "I'm thinking of a number; triple it and add {c} and you get {a}. What is it?",
    "Can a chessboard with two opposite corners removed be covered by dominoes? Why or why not?",
    "If {c} cats catch {c} mice in {c} minutes, how many cats catch 100 mice in 100 minutes?",
    "What is the expected number of coin flips to get two heads in a row?",
    "Out of {a} people, what is the chance two share a birthday, roughly? Explain your reasoning.",
    "A ladder {a} m long leans on a wall with its foot {c} m out. How high does it reach?",
    "If all roses are flowers and some flowers fade quickly, can we conclude some roses fade quickly?",
    "If {name} is taller than {name2} and {name2} is taller than Sam, who is the shortest? Why?",
    "What day of the week will it be {a}{b} days after a Tuesday?",
    "A recipe for {c} people needs {n} eggs. How many eggs for {a} people?",
    "How many handshakes happen when {a} people each shake hands once?",
    "Two candles of equal length burn in {c} and {n} hours. When is one twice as long as the other?",
    "If the probability of rain is {pct}% each day, what is the chance of two dry days in a row?",
    "Solve: {c}x + {a} = {b}. Show your work.",
    "{name} earns {a} an hour and works {c} hours a day, {n} days a week. How much in {n} weeks?",
    "Prove that the product of two consecutive integers is even.",
    "A store sells pens at {c} for {a} cents. How much do {b} pens cost?",
    "Which weighs more, a kilogram of feathers or a kilogram of steel? Explain the trick.",
    "There are {a} students; {b} play football, {c} play both football and chess, and everyone "
    "plays at least one. How many play chess only?",
    "If you fold a sheet of paper {c} times, how many layers do you get?",
    "A boat goes {a} km downstream in {c} hours and back in {n} hours. What is the current's speed?",
    "My {n} coins are worth {a} cents, all nickels or dimes. How many of each?",
    "A train leaves {city} at {speed} km/h and another leaves {city2} at {speed2} km/h toward it; "
    "the cities are {a}0 km apart. When do they meet?",
    "{name} has {a} {item}. {name2} has {b} more than twice as many. How many {item} do they have "
    "together?",
    "If a shirt costs {a} dollars after a {pct}% discount, what was the original price?",
    "I roll two dice. What is the chance that the sum is at least {c}?",
    "A bat and a ball cost {a}.10 in total. The bat costs {a} more than the ball. What does the "
    "ball cost?",
    "Three friends split a bill of {a}{b} euros; one pays twice as much as each of the others. "
    "Who pays what?",
    "Is {a}{b}{c} divisible by 3? Explain why.",
    "In how many ways can {n} people sit around a round table?",
    "A rectangle has a perimeter of {a} cm and one side is {c} cm. What is its area?",
    "What comes next in the sequence 2, 6, 12, 20, 30, ...? Justify your answer.",
    "All bloops are razzies and some razzies are lazzies. Must some bloops be lazzies?",
    "{name} is twice as old as {name2} was {c} years ago, and together they are {a}. How old is "
    "each?",
    "Show that the sum of two odd numbers is always even.",
    "If it takes {c} machines {c} minutes to make {c} widgets, how long do 100 machines need for "
    "100 widgets?",
    "A tank fills in {c} hours with pipe A and {n} hours with pipe B. How long with both open?",
    "Why is the square root of 2 irrational? Walk me through the argument.",
    "Knights always tell the truth and knaves always lie. A says 'B is a knave'; B says 'we are "
    "both knights'. Who is what?",
    "Un tren sale a las {c}:00 a {speed} km/h; otro sale una hora después a {speed2} km/h. "
    "¿Cuándo lo alcanza?",
    "A population grows {pct}% a year. After how many years does it double?",
    "Which is larger, 2^{a} or 10^{c}? Explain without a calculator.",
    "You have a 3-litre jug and a 5-litre jug. How do you measure exactly 4 litres?",
    "If {name} reads {a} pages a day and the book has {a}{b} pages, on which day does she finish, "
    "starting Monday?",
    "A snail climbs {c} m up a well by day and slips back 1 m each night. The well is {a} m deep. "
    "How many days?",
    "There are {n} red and {c} blue balls in a bag. Two are drawn without replacement. What is "
    "the probability both are red?",
    "Find all integers x such that x^2 - {c}x + 6 = 0 has integer roots, and explain.",
    "Is the following argument valid? If it rains the street is wet. The street is wet. "
    "So it rained.",
    "A clock shows 3:15. What is the angle between the hands?",
    "{name} walks to school at 4 km/h and back at 6 km/h. What is the average speed?",
    "Combien de poignées de main si {a} personnes se saluent toutes une fois ?",
    "Think carefully: a farmer has {a} sheep and all but {c} run away. How many are left?",
)
EXTRACTION = (
    "{longer}\n\n{contact}\n\nFind every email address in the document above.",
    "Name the organisations that appear in this text: {doc}",
    "Which companies, people or places occur here? {doc}",
    "List any brand or company names in the following: {doc}",
    "Who signed this letter and on what date? {doc}",
    "Extract the action items and their owners: {doc}",
    "Pull every time expression from this schedule: {event}",
    "{contact}\nWhat are the email addresses here?",
    "List the ingredients mentioned in: I used 2 eggs, 200 g flour, a pinch of salt and {c}0 ml milk.",
    "Give me all the locations named in this text: {doc}",
    "Extract the totals from each receipt: {invoice}",
    "Find the names and titles of everyone in this announcement: {people}",
    "Extract the people, places and dates from this text: {doc}",
    "{doc}\n\nList every proper noun above.",
    "Pull the numbers out of this: {doc}",
    "From the following, list each name with the email next to it. {contact}",
    "What is the due date in this? Just the date. {invoice}",
    "Grab all the URLs and emails from: {contact}",
    "Give me the key facts as field: value lines. {doc}",
    "Find every amount of money and what it was for: {doc}",
    "{event}\n\nWhen and where exactly?",
    "Make a list of the companies in this text: {doc}",
    "Locate all phone numbers and format them as E.164: {contact}",
    "Which products and prices are listed here? {invoice}",
    "Extract every email address from this: {contact}",
    "{contact}\n\nList all phone numbers above.",
    "Pull out the names of all the people mentioned: {people}",
    "From this invoice, get the total, the due date and the vendor.\n{invoice}",
    "{invoice}\nWhat is the total amount and the date?",
    "Which dates and times appear in the following message? {event}",
    "Find the city and the date of the meeting in this note: {event}",
    "Give me a table of item, quantity and price from this receipt: {invoice}",
    "Identify every organisation and person named here: {people}",
    "Parse the postal address out of this message into street, city and postcode: {contact}",
    "List the flight numbers and departure times: {event}",
    "{people}\n\nWho is mentioned, and what role does each have?",
    "Get me just the email addresses, one per line:\n{contact}",
    "Tag each entity (PERSON, ORG, LOC) in: {people}",
    "What are the order number and payment method in this? {invoice}",
    "Extrae todas las fechas de este texto: {event}",
    "Pick out the key fields (who, what, when, where) from: {event}",
    "I need the contact details from this message, nothing else: {contact}",
    "{event}\nExtract the deadlines.",
    "Fill in name / company / email for each contact: {contact}",
    "Scan this and return the amounts of money it mentions: {invoice}",
    "Which people and places does this mention? {people}",
    "Read this and give me start date, end date and price: {event}",
    "Copy out every number in the text below with what it refers to.\n{invoice}",
    "Entnimm diesem Text alle Namen und E-Mail-Adressen: {contact}",
)
SUMMARIZATION = (
    "{longer}\n\nSummarize the report above for the board.",
    "Please summarise this long document:\n\n{longer}",
    "Here's the full transcript. {longer}\n\nWhat were the main points?",
    "Summarize this for me: {short}",
    "{short}\n\nCan you give me the short version?",
    "tl;dr of this please: {short}",
    "Turn these notes into a few bullet points I can revise from: {short}",
    "{short} -- summarize that in one sentence",
    "Quick summary of this paragraph? {short}",
    "Summarise this thread for me: {long}",
    "{long}\n\nWhat's the gist?",
    "Give a short overview of the text below.\n{long}",
    "Can you sum up this article in a paragraph? {long}",
    "{long}\n\nWrite a summary for the newsletter.",
    "Recap the main arguments: {long}",
    "Turn this into a short summary with three bullets: {doc}",
    "{long}\nToo long, please summarize",
    "{doc}\n\nSummarize.",
    "Summarize the following text in plain English: {doc}",
    "What's the short version of this? {long}",
    "{long}\n\nCan you give me a quick overview?",
    "Please write a two-sentence summary of this email: {doc}",
    "Give me a brief summary of the meeting notes: {long}",
    "{long}\n\nKey points only.",
    "Shorten this text to about a third of its length: {long}",
    "Summarise this review for someone deciding whether to buy: {long}",
    "{doc}\nsummary pls",
    "Create a short digest of this news item: {long}",
    "What's the bottom line of this report? {long}",
    "{long}\n\nSummarize this in {n} sentences.",
    "TL;DR please:\n{long}",
    "Can you give me the gist of this? {long}",
    "Write a short abstract for the following:\n{long}",
    "{long}\n\nWhat are the main takeaways?",
    "Condense the notes below into bullet points.\n{long}",
    "Résume ce texte en trois phrases : {long}",
    "{long}\n\nsum this up for me",
    "Boil this down to one paragraph for my boss: {long}",
    "Give me the key points of this article:\n\n{long}",
    "{long}\nShorter version please.",
    "Make a brief recap of what happened here: {long}",
    "Here is a text. {long} Please summarise it for a ten-year-old.",
    "Fasse den folgenden Text kurz zusammen: {long}",
    "{long}\n\nIn a nutshell?",
    "Write a one-line headline and a three-sentence summary for: {long}",
    "Reduce this to its essentials, max 50 words: {long}",
    "{long}\n\nWhat is this text about, briefly?",
    "Can you shorten this a lot? {long}",
    "Executive summary of the following, please.\n{long}",
    "{long}\n\nOutline the main points as a list.",
    "Resume este texto en pocas palabras: {long}",
    "I don't have time to read all of this: {long}",
    "{long}\n\nDigest this into three bullets.",
    "Please produce a synopsis of the passage below.\n\n{long}",
)
CHAT = (
    "hello",
    "hey there",
    "good evening!",
    "hiya",
    "Hello?",
    "what's up?",
    "yo",
    "hi",
    "Hey!",
    "Are you there?",
    "ok thanks",
    "bye!",
    "I want to buy a car, which one is reliable?",
    "I need to import some furniture from Italy, any advice?",
    "Which class should I take at the gym?",
    "How do bees make honey?",
    "How does a rainbow form?",
    "How do I become a better listener?",
    "Why do we dream?",
    "How do birds know where to migrate?",
    "How does the stock market work, simply?",
    "Describe a sunset over {city}.",
    "Write a diary entry of a cat about {topic}.",
    "What is the meaning of life, in your view?",
    "How should I decorate a small bedroom?",
    "How do I make my houseplants grow faster?",
    "How can I save money on groceries?",
    "How should I prepare for my first marathon?",
    "How do I tell my friend I can't come to her party?",
    "What's the best way to learn to cook?",
    "How can I be more productive in the morning?",
    "Why do cats purr?",
    "What's the origin of Halloween?",
    "Can you tell me about the history of {city}?",
    "How do I politely decline a meeting?",
    "What are good questions to ask on a first date?",
    "Write a short motivational quote for students.",
    "I'm bored, entertain me!",
    "What's the difference between weather and climate?",
    "Any tips for a long flight?",
    "Write a product description for handmade candles.",
    "What is love?",
    "How do airplanes stay in the air?",
    "What's your favourite season and why?",
    "Can you help me name my new bakery?",
    "Write a short bedtime story about {topic}.",
    "What should I pack for a week in {city}?",
    "good morning :)",
    "Who painted the Mona Lisa?",
    "Give me three fun facts about {topic}.",
    "How do I stay motivated when working from home?",
    "Write a song chorus about {topic}.",
    "What is a good way to apologise to a friend?",
    "Recommend a board game for four players.",
    "Compose a short speech for my team's end-of-year party.",
    "Where is {city}?",
    "I just finished {book}. What should I read next?",
    "Write a funny tweet about Mondays.",
    "What are some healthy snacks for work?",
    "Describe {city} to someone who has never been.",
    "Is coffee bad for you?",
    "Write a thank-you note to my teacher.",
    "how old is the universe",
    "hi! how are you doing today?",
    "What's a good name for a golden retriever puppy?",
    "Write a poem about {topic}.",
    "Tell me a short story about {topic}.",
    "Suggest a few books like {book}.",
    "What should I see in {city} in two days?",
    "Draft a polite email to my landlord about a broken heater.",
    "How can I sleep better when I'm stressed?",
    "What is the capital of Australia?",
    "Who wrote {book}?",
    "Write a haiku about {topic}.",
    "thanks, that was really helpful!",
    "Can you recommend a vegetarian dinner I can cook in 20 minutes?",
    "Bonjour ! Tu peux me conseiller un film pour ce soir ?",
    "How do I ask my boss for a raise?",
    "Translate 'see you tomorrow' into Italian.",
    "Is it worth learning the piano as an adult?",
    "Write a birthday message for my grandmother who turns 90.",
    "What's the weather usually like in {city} in March?",
    "Tell me a joke about cats.",
    "Give me ideas for a rainy weekend with kids.",
    "How many days are in a leap year?",
    "Kannst du mir ein Rezept für Apfelkuchen geben?",
    "What does 'serendipity' mean?",
    "Write a limerick about {topic}.",
    "I'm feeling a bit lonely tonight, can we just talk?",
    "Who was the first person on the moon?",
    "Write a cover letter opening for a job as a nurse.",
    "What's the difference between a crocodile and an alligator?",
    "Describe {topic} in the style of a noir detective.",
    "How do I get red wine out of a carpet?",
    "Why is the sky blue?",
    "Plan a three-day trip to {city} on a budget.",
    "¿Qué me recomiendas para aprender inglés?",
    "What happened in {year}?",
    "Write a toast for my best friend's wedding.",
    "Do you like music? What kind?",
    "Summarize your day in three words.",
)
TASKS = {
    "code": CODE,
    "reasoning": REASONING,
    "extraction": EXTRACTION,
    "summarization": SUMMARIZATION,
    "chat": CHAT,
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_flights",
        "parameters": {
            "type": "object",
            "properties": {
                "from": {"type": "string"},
                "to": {"type": "string"},
                "date": {"type": "string"},
            },
        },
    },
}
AGENT = (
    "What's the weather in {city}?",
    "Find me a flight from {city} to {city2} next Friday.",
    "Is it going to rain in {city} tomorrow?",
    "Book the cheapest flight to {city2}.",
    "Check the forecast for {city} and tell me if I need a coat.",
)
JSON_EXTRACT = (
    "Extract name and email: {contact}",
    "Return the invoice fields: {invoice}",
    "List the events: {event}",
    "Who is mentioned? {people}",
    "Give the total and the vendor: {invoice}",
)


OPENERS = (
    "Hi, ",
    "Quick question: ",
    "Please help. ",
    "Hello! ",
    "I have a question. ",
    "Can you help? ",
    "OK so ",
    "Hi there. ",
)
CLOSERS = (
    " Thanks!",
    " Thank you.",
    " Please be concise.",
    " Keep it short.",
    " Thanks in advance.",
    " :)",
)


def fill(template: str, rng: random.Random) -> str:
    # in order of appearance (a set would make the output depend on PYTHONHASHSEED)
    names = dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(template) if f)
    return template.format(**{n: SLOTS[n](rng) for n in names})


def _variant(text: str, rng: random.Random) -> str:
    """Case and spacing noise, as people type."""
    r = rng.random()
    if r < 0.15:
        return text.lower()
    if r < 0.25:
        return text.rstrip("?.!") + ""
    if r < 0.3:
        return "Hey, " + text[0].lower() + text[1:]
    if r < 0.4:
        return rng.choice(OPENERS) + text
    if r < 0.5:
        return text + rng.choice(CLOSERS)
    return text


def build(seed: int, per_template: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for task, templates in TASKS.items():
        for t, template in enumerate(templates):
            split = "test" if t % 5 == 2 else "train"
            seen: set[str] = set()
            cap = per_template if "{" in template.replace("{{", "") else 3
            for _ in range(per_template * 3):
                if len(seen) >= cap:
                    break
                text = _variant(fill(template, rng), rng)
                if text in seen:
                    continue
                seen.add(text)
                rows.append({"task": task, "split": split, "template": f"{task}/{t}", "text": text})
    for t, template in enumerate(AGENT):
        tools = [WEATHER_TOOL] if "flight" not in template else [SEARCH_TOOL]
        for _ in range(6):
            rows.append(
                {
                    "task": "agent",
                    "split": "test",
                    "template": f"agent/{t}",
                    "text": fill(template, rng),
                    "tools": tools,
                }
            )
    for t, template in enumerate(JSON_EXTRACT):
        for _ in range(6):
            rows.append(
                {
                    "task": "extraction",
                    "split": "test",
                    "template": f"json/{t}",
                    "text": fill(template, rng),
                    "response_format": {"type": "json_object"},
                }
            )
    for i, row in enumerate(rows):
        row["id"] = f"{row['template']}/{i}"
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.data.build_classify_set")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--per-template", type=int, default=9)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    rows = build(a.seed, a.per_template)
    with a.out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for row in rows:
        key = f"{row['task']}/{row['split']}"
        counts[key] = counts.get(key, 0) + 1
    print(f"{len(rows)} prompts -> {a.out}: {json.dumps(counts, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
