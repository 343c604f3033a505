"""Writes ``semantic_pairs.jsonl``: labelled prompt pairs for the semantic cache.

    python -m evals.data.build_semantic_pairs

Each line: ``{"id", "label": "same"|"different", "kind", "a", "b"}``. ``same``: the second
prompt asks what the first asks (a rephrasing, a typo, other casing or punctuation, filler
words), so one answer serves both. ``different``: it asks something else and would be
a false hit if answered from the first; most are hard on purpose — the same words in
another order (a conversion's direction), a negation, another number, entity, language or
unit, the opposite, another task on the same topic — and some are plainly unrelated.
Hand-written, English; the kinds let a report say where the false hits are.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).with_name("semantic_pairs.jsonl")

SAME: dict[str, list[tuple[str, str]]] = {
    "rephrase": [
        ("How do I reset my password?", "How can I reset my password?"),
        ("What is the capital of France?", "What's the capital city of France?"),
        ("How do I reverse a list in Python?", "How can I reverse a Python list?"),
        ("What time zone is Tokyo in?", "Which time zone is Tokyo in?"),
        ("How many ounces are in a pound?", "How many ounces make up one pound?"),
        ("What does HTTP status 404 mean?", "What is the meaning of HTTP status code 404?"),
        ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?"),
        ("How do I undo the last git commit?", "How can I undo my last git commit?"),
        (
            "What is the boiling point of water at sea level?",
            "At sea level, what is the boiling point of water?",
        ),
        ("Explain what a hash table is.", "Can you explain what a hash table is?"),
        ("How do I center a div in CSS?", "How can I center a div with CSS?"),
        ("What is photosynthesis?", "What's photosynthesis?"),
        (
            "How long should I boil an egg for a soft yolk?",
            "How long do I boil an egg to get a soft yolk?",
        ),
        ("What are the symptoms of dehydration?", "What symptoms does dehydration cause?"),
        ("How do I check my Python version?", "How can I check which Python version I have?"),
        (
            "What is the difference between TCP and UDP?",
            "What's the difference between TCP and UDP?",
        ),
        ("Give me a synonym for happy.", "What is a synonym for happy?"),
        ("How do I cancel my subscription?", "How can I cancel my subscription?"),
        ("What is the speed of light?", "What's the speed of light?"),
        ("Summarize the plot of Hamlet.", "Give me a summary of the plot of Hamlet."),
        (
            "How do I convert a string to an integer in JavaScript?",
            "How can I convert a string into an integer in JavaScript?",
        ),
        (
            "What is the largest planet in the solar system?",
            "Which planet is the largest in the solar system?",
        ),
        ("How do I delete a branch in git?", "How can I delete a git branch?"),
        ("Translate 'good morning' into Spanish.", "How do you say 'good morning' in Spanish?"),
        (
            "What is a good name for a golden retriever?",
            "What's a good name for a golden retriever?",
        ),
        ("Why is the sky blue?", "Why does the sky look blue?"),
        (
            "How do I list all files in a directory in Linux?",
            "How can I list all the files in a directory on Linux?",
        ),
        ("What is the population of Canada?", "What's the population of Canada?"),
        ("Recommend a book about stoicism.", "Can you recommend a book about stoicism?"),
        ("How do I make cold brew coffee?", "How do you make cold brew coffee?"),
        ("What does a product manager do?", "What does a product manager actually do?"),
        ("How can I improve my sleep?", "How do I improve my sleep?"),
        (
            "What is the formula for the area of a circle?",
            "What's the formula for a circle's area?",
        ),
        ("Write a haiku about autumn.", "Write me a haiku about autumn."),
        ("What is Docker used for?", "What is Docker used for, in short?"),
        (
            "How do I sort a dictionary by value in Python?",
            "How can I sort a Python dictionary by its values?",
        ),
        ("What are the opening hours of the support line?", "When is the support line open?"),
        ("How do I update my shipping address?", "How can I change my shipping address?"),
        ("Where can I download my invoice?", "Where do I download my invoice?"),
        ("Is it safe to eat raw cookie dough?", "Is eating raw cookie dough safe?"),
    ],
    "typo": [
        ("How do I reset my password?", "How do I reset my pasword?"),
        ("What is the capital of Australia?", "What is the capitol of Australia?"),
        ("Explain recursion with an example.", "Explain recursoin with an example."),
        ("How do I install numpy?", "How do I instal numpy?"),
        (
            "What is the weather like in London in March?",
            "What is the wether like in London in March?",
        ),
        (
            "How do I merge two dictionaries in Python?",
            "How do I merge two dictionaires in Python?",
        ),
        ("What are the benefits of meditation?", "What are the benifits of meditation?"),
        (
            "Write a cover letter for a software engineer job.",
            "Write a cover leter for a software engineer job.",
        ),
        ("How do I remove duplicates from a list?", "How do I remove duplicats from a list?"),
        ("What is machine learning?", "What is machine learnig?"),
        ("How do I track my order?", "How do I trak my order?"),
        ("Give me ideas for a birthday party.", "Give me ideas for a birthday pary."),
        (
            "What is the difference between affect and effect?",
            "What is the diffrence between affect and effect?",
        ),
        ("How do I open a PDF in Python?", "How do I open a PDF in pyhton?"),
        ("Explain the theory of relativity simply.", "Explain the theory of relativty simply."),
        ("How do I change the font size in Word?", "How do I chnage the font size in Word?"),
        ("What is a mortgage?", "What is a morgage?"),
        ("How do I get rid of fruit flies?", "How do I get rid of fruit flys?"),
        ("Recommend some science fiction movies.", "Recommend some science fiction movise."),
        ("How do I write a unit test in Java?", "How do I write a unit tset in Java?"),
        ("What does a plumber do?", "What does a plummer do?"),
        ("How do I lift weights?", "How do I lift weighs?"),
        ("How do I write a poem?", "How do I wrote a poem?"),
    ],
    "casing_punctuation": [
        ("how do i reset my password", "How do I reset my password?"),
        ("WHAT IS THE CAPITAL OF ITALY?", "What is the capital of Italy?"),
        ("what's 15% of 80", "What's 15% of 80?"),
        ("Explain Kubernetes pods.", "explain kubernetes pods"),
        ("How do I boil rice?!", "How do I boil rice?"),
        ("Who painted the Mona Lisa", "Who painted the Mona Lisa?"),
        ("What is an API?", "what is an api"),
        ("List three primary colors.", "list three primary colors"),
        ("How do I exit vim?", "how do I exit Vim"),
        ("Define entropy.", "define entropy"),
        ("What is 2 + 2?", "what is 2+2?"),
        ("Tell me a joke about cats.", "tell me a joke about cats!"),
        ("How do I make pancakes", "How do I make pancakes?"),
        ("What year did World War II end?", "what year did world war ii end"),
        ("Is Pluto a planet?", "is pluto a planet"),
        ("Give me a recipe for guacamole.", "give me a recipe for guacamole"),
        ("What is the GDP of Germany?", "what is the gdp of germany?"),
        ("How do I reboot my router?", "how do i reboot my router?"),
        ("Write a limerick about a frog.", "write a limerick about a frog"),
        ("What does SQL stand for?", "what does sql stand for"),
    ],
    "filler": [
        ("How do I reset my password?", "Hi! How do I reset my password? Thanks."),
        ("What is the capital of Spain?", "Quick question: what is the capital of Spain?"),
        (
            "How do I reverse a string in Python?",
            "Please tell me how do I reverse a string in Python.",
        ),
        ("Explain what an API gateway does.", "Could you please explain what an API gateway does?"),
        ("What is the boiling point of water?", "Hey, what is the boiling point of water?"),
        ("How do I cancel my order?", "Hello, how do I cancel my order, please?"),
        ("Write a short poem about the sea.", "Please write a short poem about the sea."),
        ("What is inflation?", "Can you tell me what inflation is?"),
        ("How do I clear my browser cache?", "Hi there, how do I clear my browser cache?"),
        ("Suggest a name for my bakery.", "Could you suggest a name for my bakery?"),
        (
            "What is the tallest mountain in the world?",
            "I was wondering, what is the tallest mountain in the world?",
        ),
        ("How do I freeze panes in Excel?", "Quick one: how do I freeze panes in Excel?"),
        ("What causes rainbows?", "Just curious, what causes rainbows?"),
        ("How do I add a user in Linux?", "Could you tell me how to add a user in Linux?"),
        ("Give me tips for a job interview.", "Please give me some tips for a job interview."),
        ("What is the meaning of life?", "So, what is the meaning of life?"),
        (
            "How do I unsubscribe from the newsletter?",
            "Hi, how do I unsubscribe from the newsletter? Thank you!",
        ),
        (
            "Explain blockchain in simple terms.",
            "Can you explain blockchain in simple terms, please?",
        ),
        ("What is a good stretching routine?", "Hey, what is a good stretching routine?"),
        (
            "How do I set up two-factor authentication?",
            "Hello! How do I set up two-factor authentication?",
        ),
    ],
}

DIFFERENT: dict[str, list[tuple[str, str]]] = {
    "direction": [
        ("Convert 100 Celsius to Fahrenheit.", "Convert 100 Fahrenheit to Celsius."),
        (
            "Translate 'thank you' from English to French.",
            "Translate 'thank you' from French to English.",
        ),
        (
            "How do I convert a list to a string in Python?",
            "How do I convert a string to a list in Python?",
        ),
        ("How many kilometers are in a mile?", "How many miles are in a kilometer?"),
        ("Convert JSON to YAML.", "Convert YAML to JSON."),
        (
            "How do I migrate from MySQL to PostgreSQL?",
            "How do I migrate from PostgreSQL to MySQL?",
        ),
        ("Is a square a rectangle?", "Is a rectangle a square?"),
        ("How do I convert euros to dollars?", "How do I convert dollars to euros?"),
        (
            "How do I copy files from my laptop to the server?",
            "How do I copy files from the server to my laptop?",
        ),
        ("Convert binary 1010 to decimal.", "Convert decimal 1010 to binary."),
        ("Who was president before Lincoln?", "Who was president after Lincoln?"),
        ("How do I move from Windows to Linux?", "How do I move from Linux to Windows?"),
        ("What did the dog do to the cat?", "What did the cat do to the dog?"),
        ("How do I convert inches to centimeters?", "How do I convert centimeters to inches?"),
        ("Why do cats hate dogs?", "Why do dogs hate cats?"),
        (
            "How do I port this code from Java to Kotlin?",
            "How do I port this code from Kotlin to Java?",
        ),
        ("Convert pounds to kilograms.", "Convert kilograms to pounds."),
        (
            "Translate 'I love you' from German to English.",
            "Translate 'I love you' from English to German.",
        ),
        (
            "How do I upgrade from version 2 to version 3?",
            "How do I downgrade from version 3 to version 2?",
        ),
        ("Compute the time from UTC to PST.", "Compute the time from PST to UTC."),
    ],
    "negation": [
        ("What foods are good for diabetics?", "What foods are not good for diabetics?"),
        ("Which countries use the euro?", "Which countries do not use the euro?"),
        (
            "What should I do before a job interview?",
            "What should I not do before a job interview?",
        ),
        ("Is coffee good for you?", "Is coffee not good for you?"),
        ("Why is my code working?", "Why is my code not working?"),
        ("Which plants are safe for cats?", "Which plants are not safe for cats?"),
        (
            "What are things to say to a grieving friend?",
            "What are things never to say to a grieving friend?",
        ),
        ("List animals that can swim.", "List animals that cannot swim."),
        ("How do I make my dog bark?", "How do I make my dog stop barking?"),
        (
            "What happens if I pay my credit card bill?",
            "What happens if I don't pay my credit card bill?",
        ),
        ("Which vitamins should I take together?", "Which vitamins should I not take together?"),
        ("Why does my phone charge?", "Why does my phone not charge?"),
        (
            "Write a function that returns true for even numbers.",
            "Write a function that returns true for numbers that are not even.",
        ),
        (
            "What medications can I take with alcohol?",
            "What medications should I never take with alcohol?",
        ),
        (
            "Which programming languages have garbage collection?",
            "Which programming languages have no garbage collection?",
        ),
        ("When should I use a semicolon?", "When should I not use a semicolon?"),
        ("Can I freeze cooked rice?", "Can't I freeze cooked rice?"),
        (
            "What are signs a relationship is healthy?",
            "What are signs a relationship is not healthy?",
        ),
        ("Which mushrooms are edible?", "Which mushrooms are not edible?"),
        ("Should I include my photo on my resume?", "Should I not include my photo on my resume?"),
    ],
    "number": [
        ("What is 15% of 80?", "What is 15% of 90?"),
        ("What is 2 + 2?", "What is 2 + 3?"),
        ("Convert 100 Celsius to Fahrenheit.", "Convert 37 Celsius to Fahrenheit."),
        (
            "Write a loop that prints the numbers 1 to 10.",
            "Write a loop that prints the numbers 1 to 100.",
        ),
        ("What happened in 1969?", "What happened in 1989?"),
        ("Give me 3 ideas for dinner.", "Give me 5 ideas for dinner."),
        ("What is the square root of 144?", "What is the square root of 169?"),
        ("How much is 250 dollars in euros?", "How much is 2500 dollars in euros?"),
        ("Summarize chapter 3 of the book.", "Summarize chapter 4 of the book."),
        ("What is the 10th Fibonacci number?", "What is the 20th Fibonacci number?"),
        ("Is 97 a prime number?", "Is 91 a prime number?"),
        ("Write a 100-word story about a robot.", "Write a 500-word story about a robot."),
        ("What was the weather on March 3?", "What was the weather on March 13?"),
        ("How many calories are in 2 eggs?", "How many calories are in 6 eggs?"),
        ("What is 12 times 12?", "What is 12 times 13?"),
        ("Convert 5 miles to kilometers.", "Convert 50 miles to kilometers."),
        ("What is the HTTP status code 401?", "What is the HTTP status code 403?"),
        ("Explain Python 2 print statements.", "Explain Python 3 print statements."),
        ("What is 7 factorial?", "What is 8 factorial?"),
        ("Plan a 3-day trip to Rome.", "Plan a 7-day trip to Rome."),
        ("What is the capital of France in 1800?", "What is the capital of France in 1900?"),
        ("How old is someone born in 1990?", "How old is someone born in 2000?"),
        ("Round 3.14159 to 2 decimal places.", "Round 3.14159 to 3 decimal places."),
        ("What is 2 to the power of 10?", "What is 2 to the power of 16?"),
        ("Name the 4 largest US states.", "Name the 5 largest US states."),
    ],
    "entity": [
        ("What is the capital of France?", "What is the capital of Germany?"),
        ("Who wrote Hamlet?", "Who wrote Macbeth?"),
        ("How do I reverse a list in Python?", "How do I reverse a list in Java?"),
        ("What is the population of Canada?", "What is the population of Mexico?"),
        ("Summarize the plot of Hamlet.", "Summarize the plot of Othello."),
        ("How do I install Docker on Ubuntu?", "How do I install Docker on Windows?"),
        ("What is the time zone of Tokyo?", "What is the time zone of Sydney?"),
        ("Who is the CEO of Apple?", "Who is the CEO of Microsoft?"),
        ("What is the boiling point of water?", "What is the boiling point of ethanol?"),
        ("Tell me about the French Revolution.", "Tell me about the American Revolution."),
        ("How do I cook salmon?", "How do I cook chicken?"),
        ("What are the side effects of ibuprofen?", "What are the side effects of aspirin?"),
        ("Translate 'good morning' into Spanish.", "Translate 'good morning' into Italian."),
        ("Write a poem about the ocean.", "Write a poem about the desert."),
        (
            "How do I connect to a MySQL database in Python?",
            "How do I connect to a MongoDB database in Python?",
        ),
        ("What is the tallest building in New York?", "What is the tallest building in Dubai?"),
        ("How do I delete a branch in git?", "How do I delete a tag in git?"),
        ("What does a cardiologist do?", "What does a dermatologist do?"),
        ("Recommend a book about stoicism.", "Recommend a book about existentialism."),
        (
            "What is the weather like in London in March?",
            "What is the weather like in Paris in March?",
        ),
        ("How do I center a div in CSS?", "How do I center a div in Flutter?"),
        ("Who won the 2018 World Cup?", "Who won the 2018 Super Bowl?"),
        ("What is the chemical symbol for gold?", "What is the chemical symbol for silver?"),
        ("How do I update my shipping address?", "How do I update my billing address?"),
        ("Where can I download my invoice?", "Where can I download my contract?"),
        (
            "What are the opening hours of the London store?",
            "What are the opening hours of the Berlin store?",
        ),
        (
            "How do I sort a dictionary by value in Python?",
            "How do I sort a dictionary by key in Python?",
        ),
        ("Explain the rules of chess.", "Explain the rules of checkers."),
        ("What is a golden retriever like as a pet?", "What is a border collie like as a pet?"),
        ("Who painted the Mona Lisa?", "Who painted The Starry Night?"),
    ],
    "opposite": [
        ("How do I increase my credit score?", "How do I decrease my credit score?"),
        ("What are the advantages of remote work?", "What are the disadvantages of remote work?"),
        ("How do I gain weight?", "How do I lose weight?"),
        ("What is the fastest sorting algorithm?", "What is the slowest sorting algorithm?"),
        ("How do I encrypt a file?", "How do I decrypt a file?"),
        ("How do I make my website faster?", "How do I make my website slower?"),
        ("What is the hottest planet?", "What is the coldest planet?"),
        ("How do I enable dark mode?", "How do I disable dark mode?"),
        (
            "Write a positive review of this restaurant.",
            "Write a negative review of this restaurant.",
        ),
        ("What are the pros of nuclear energy?", "What are the cons of nuclear energy?"),
        ("How do I zoom in on a Mac?", "How do I zoom out on a Mac?"),
        ("How do I compress a folder?", "How do I extract a folder?"),
        ("What is the longest river in Africa?", "What is the shortest river in Africa?"),
        ("How do I mute a Slack channel?", "How do I unmute a Slack channel?"),
        ("How do I subscribe to the newsletter?", "How do I unsubscribe from the newsletter?"),
        ("What makes a good leader?", "What makes a bad leader?"),
        ("How do I start the server?", "How do I stop the server?"),
        ("How do I lock my screen?", "How do I unlock my screen?"),
        (
            "Give me arguments for a four-day work week.",
            "Give me arguments against a four-day work week.",
        ),
        ("How do I raise the price of a product?", "How do I lower the price of a product?"),
    ],
    "task": [
        (
            "Summarize this: the meeting moved to Friday.",
            "Translate this: the meeting moved to Friday.",
        ),
        ("Write a poem about autumn.", "Write an essay about autumn."),
        ("Explain what a hash table is.", "Implement a hash table."),
        ("What is recursion?", "Write a recursive function."),
        ("Give me a synonym for happy.", "Give me an antonym for happy."),
        ("Translate 'hello' into French.", "Pronounce 'hello' in French."),
        ("Describe the Eiffel Tower.", "Draw the Eiffel Tower in ASCII art."),
        ("Write a haiku about autumn.", "Write a limerick about autumn."),
        ("Explain the causes of World War I.", "Explain the consequences of World War I."),
        ("How do I make cold brew coffee?", "How much caffeine is in cold brew coffee?"),
        ("What is Docker?", "What is the history of Docker?"),
        ("Write a cover letter for a nurse.", "Write a resume for a nurse."),
        ("Find the bug in my sorting function.", "Write tests for my sorting function."),
        ("Tell me a joke about programmers.", "Tell me a fact about programmers."),
        (
            "What is the formula for the area of a circle?",
            "What is the formula for the circumference of a circle?",
        ),
        ("How do I create a git branch?", "How do I rename a git branch?"),
        ("Explain photosynthesis to a child.", "Explain photosynthesis to a biologist."),
        ("Who invented the telephone?", "When was the telephone invented?"),
        ("Where is Mount Everest?", "How tall is Mount Everest?"),
        ("What does a product manager do?", "How do I become a product manager?"),
        ("How do I cancel my subscription?", "How do I pause my subscription?"),
        ("How do I reset my password?", "How do I reset my username?"),
        ("Where can I download my invoice?", "Why was my invoice charged twice?"),
        ("How do I track my order?", "How do I return my order?"),
        ("What are the symptoms of the flu?", "What is the treatment for the flu?"),
    ],
    "real_word_slip": [
        ("What is a bear?", "What is a beer?"),
        ("What is a mouse?", "What is a moose?"),
        ("How do I boil pasta?", "How do I broil pasta?"),
        ("How do I file my taxes?", "How do I fill my taxes?"),
        ("How do I bake bread?", "How do I bike bread?"),
        ("How do I clean my carpet?", "How do I clear my carpet?"),
        ("Tell me about the planet Mars.", "Tell me about the planet Mart."),
        ("How do I paint a wall?", "How do I print a wall?"),
        ("What is the price of wheat?", "What is the price of wheel?"),
        ("How do I train a horse?", "How do I trail a horse?"),
        ("What is a dessert?", "What is a desert?"),
        ("What is the role of the liver?", "What is the role of the lever?"),
        ("How do I store potatoes?", "How do I stone potatoes?"),
        ("Where do penguins live?", "Where do penguins love?"),
        ("How do I fold a shirt?", "How do I hold a shirt?"),
        ("What is a cloud server?", "What is a crowd server?"),
        ("What causes a flood?", "What causes a flu?"),
    ],
    "unrelated": [
        ("How do I reset my password?", "What is the capital of France?"),
        ("Write a haiku about autumn.", "How do I install numpy?"),
        ("What is machine learning?", "Give me a recipe for guacamole."),
        ("Explain Kubernetes pods.", "Who painted the Mona Lisa?"),
        ("How do I boil rice?", "What is the speed of light?"),
        ("Tell me a joke about cats.", "How do I delete a branch in git?"),
        ("What is inflation?", "How do I center a div in CSS?"),
        ("Recommend some science fiction movies.", "What are the symptoms of dehydration?"),
        ("How do I make pancakes?", "What is the difference between TCP and UDP?"),
        ("Why is the sky blue?", "How do I cancel my subscription?"),
        ("What does SQL stand for?", "Write a short poem about the sea."),
        ("How do I get rid of fruit flies?", "Explain the theory of relativity simply."),
        ("What is a mortgage?", "How do I write a unit test in Java?"),
        ("Is Pluto a planet?", "How do I clear my browser cache?"),
        ("What causes rainbows?", "Suggest a name for my bakery."),
        ("How do I freeze panes in Excel?", "What is the meaning of life?"),
        ("Give me tips for a job interview.", "What is the GDP of Germany?"),
        ("How do I reboot my router?", "What year did World War II end?"),
        ("What is photosynthesis?", "How do I exit vim?"),
        ("Define entropy.", "Where can I download my invoice?"),
    ],
}


def rows() -> list[dict[str, str]]:
    out = []
    for label, groups in (("same", SAME), ("different", DIFFERENT)):
        for kind, pairs in groups.items():
            for i, (a, b) in enumerate(pairs):
                out.append(
                    {"id": f"{label}/{kind}/{i}", "label": label, "kind": kind, "a": a, "b": b}
                )
    return out


def main() -> None:
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows():
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({len(rows())} pairs)")


if __name__ == "__main__":
    main()
