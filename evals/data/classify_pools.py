# ruff: noqa: E501  (prompt text reads better unbroken)
"""Vocabulary of the classifier corpus (``build_classify_set.py``): slot values and texts.

Everything here was written for this repository. Texts are short paragraphs the
summarization and extraction templates wrap; snippets are code with and without fences.
"""

from __future__ import annotations

LANGS = (
    "Python",
    "Java",
    "JavaScript",
    "TypeScript",
    "Go",
    "Rust",
    "C++",
    "C#",
    "Ruby",
    "Kotlin",
    "Swift",
    "PHP",
    "Scala",
    "Haskell",
    "C",
    "Elixir",
    "Bash",
    "R",
)
FUNC_TASKS = (
    "reverses a string",
    "checks whether a number is prime",
    "merges two sorted lists",
    "counts the vowels in a sentence",
    "returns the nth Fibonacci number",
    "removes duplicates from an array while keeping the order",
    "flattens a nested list",
    "parses a date like 2024-03-01 and returns the weekday",
    "computes a moving average",
    "validates an email address",
    "groups words that are anagrams of each other",
    "finds the longest common prefix of a list of strings",
    "converts Roman numerals to integers",
    "reads a CSV file and sums one column",
    "retries an HTTP request with exponential backoff",
    "debounces another function",
    "deep-copies a dictionary",
    "rotates a matrix by 90 degrees",
    "returns the k most frequent elements",
    "checks if two strings are anagrams",
    "serializes a binary tree to a string",
    "chunks a list into pieces of size n",
)
ALGOS = (
    "binary search",
    "quicksort",
    "merge sort",
    "Dijkstra's algorithm",
    "a trie",
    "an LRU cache",
    "breadth-first search",
    "a min-heap",
    "union-find",
    "a linked list with insert and delete",
    "the KMP string search",
    "a ring buffer",
    "topological sort",
    "a thread-safe queue",
    "a rate limiter using a token bucket",
)
HOWTOS = (
    "read a file line by line",
    "make an HTTP GET request",
    "sort a dictionary by value",
    "handle exceptions properly",
    "parse JSON",
    "run two tasks concurrently",
    "format a date as ISO 8601",
    "write to a file atomically",
    "iterate over a map",
    "declare a constant",
    "split a string on commas",
    "measure how long a function takes",
    "mock a network call in a unit test",
    "set up logging",
    "use generics",
    "pass a function as an argument",
    "connect to a Postgres database",
    "read environment variables",
    "convert a string to an integer safely",
)
ERRORS = (
    "NullPointerException",
    "TypeError: 'NoneType' object is not subscriptable",
    "segmentation fault (core dumped)",
    "undefined is not a function",
    "error[E0382]: borrow of moved value",
    "ModuleNotFoundError: No module named 'requests'",
    "IndexError: list index out of range",
    "cannot find symbol",
    "CORS policy blocked",
    "deadlock detected",
    "ORA-00942: table or view does not exist",
    "fatal: refusing to merge unrelated histories",
    "java.lang.OutOfMemoryError",
    "KeyError: 'id'",
    "Uncaught (in promise) TypeError",
)
TOOLS_DEV = (
    "webpack",
    "Maven",
    "Gradle",
    "CMake",
    "Docker",
    "npm",
    "cargo",
    "pip",
    "Xcode",
    "Kubernetes",
    "GitHub Actions",
    "Terraform",
)
SQL_TASKS = (
    "returns the top five customers by total order value",
    "finds employees who earn more than their manager",
    "counts orders per month for the last year",
    "deletes duplicate rows but keeps one",
    "joins users with their latest login",
    "lists products that were never ordered",
    "computes a running total of sales per day",
    "finds the second highest salary",
)
REACT_QS = (
    "fetch data when a component mounts",
    "avoid re-rendering a list on every keystroke",
    "share state between two sibling components",
    "use useEffect with a cleanup",
    "handle a form with several inputs",
    "lazy-load a route",
    "memoize an expensive calculation",
    "test a component that calls an API",
)
SNIPPETS = (
    "def mean(xs):\n    return sum(xs) / len(xs)\n\nprint(mean([]))",
    "for (int i = 0; i <= arr.length; i++) {\n    total += arr[i];\n}",
    "const users = await fetch('/api/users').json();\nconsole.log(users.length);",
    "SELECT name, COUNT(*) FROM orders GROUP BY customer_id;",
    'fn main() {\n    let s = String::from("hi");\n    let t = s;\n    println!("{}", s);\n}',
    "x = [1, 2, 3]\nfor i in range(len(x)):\n    if x[i] % 2 == 0:\n        x.remove(x[i])",
    "public int add(int a, int b) { return a - b; }",
    "while True:\n    line = f.readline()\n    process(line)",
    "if (user = null) {\n  return;\n}",
    "items.map(item => { item.price * 2 })",
    "func div(a, b int) int {\n    return a / b\n}",
    "let counter = 0;\nsetInterval(() => counter++, 1000);\nexport default counter;",
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def pop(self):\n"
    "        return self.items.pop(0)",
    '#include <stdio.h>\nint main() { char buf[8]; gets(buf); printf("%s", buf); }',
    "df = pd.read_csv('data.csv')\ndf['total'] = df['price'] * df['qty']\ndf.groupby('day').sum()",
    "git rebase -i HEAD~3",
    "<div onClick={handleClick()}>Save</div>",
    "async def fetch_all(urls):\n    return [await fetch(u) for u in urls]",
)
CODE_FR = (
    "qui inverse une chaîne",
    "qui trie une liste de nombres",
    "qui lit un fichier JSON",
    "qui calcule la factorielle d'un nombre",
)
CODE_DE = (
    "die eine Liste sortiert",
    "die prüft, ob eine Zahl gerade ist",
    "die eine CSV-Datei einliest",
    "die alle Duplikate entfernt",
)
CODE_ES = (
    "leer un archivo línea por línea",
    "ordenar un diccionario por valor",
    "conectar a una base de datos MySQL",
    "manejar excepciones",
)

NAMES = (
    "Alice",
    "Bob",
    "Priya",
    "Kenji",
    "Maria",
    "Omar",
    "Lena",
    "Tom",
    "Sofia",
    "Arjun",
    "Chen",
    "Fatima",
    "Lucas",
    "Ingrid",
    "Mateo",
)
ITEMS = ("apples", "pencils", "marbles", "stickers", "cookies", "books", "coins", "cards")
CITIES = (
    "Oslo",
    "Lyon",
    "Porto",
    "Kyoto",
    "Austin",
    "Nairobi",
    "Lima",
    "Gdansk",
    "Perth",
    "Montreal",
    "Seville",
    "Hanoi",
)
TOPICS = (
    "the ocean",
    "autumn leaves",
    "a lost cat",
    "city lights at night",
    "friendship",
    "a rainy Monday",
    "the first day of school",
    "an old lighthouse",
    "coffee",
    "a robot who learns to paint",
    "the moon",
    "moving to a new country",
)
BOOKS = (
    "The Name of the Wind",
    "Pride and Prejudice",
    "Dune",
    "The Martian",
    "Circe",
    "Sapiens",
    "Educated",
    "The Hobbit",
    "Project Hail Mary",
    "Norwegian Wood",
)

# Paragraph material: sentences per domain, joined at random into texts to summarise or mine.
DOMAINS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "news",
        (
            "The city council voted on Tuesday to extend the tram line to the northern suburbs.",
            "Construction is expected to begin next spring and to last about three years.",
            "Opponents argued that the budget of 240 million euros would crowd out school repairs.",
            "Supporters said the line would cut commuting times by a third for 60,000 residents.",
            "The mayor promised a public consultation before the final route is fixed.",
            "Local shop owners fear that the works will keep customers away for months.",
            "A similar project in a neighbouring city finished two years late.",
            "The regional government has agreed to pay half of the cost.",
        ),
    ),
    (
        "science",
        (
            "Researchers have found that a common soil bacterium can break down certain plastics.",
            "In laboratory tests the microbe digested thin films of PET within six weeks.",
            "The team identified two enzymes that do most of the work.",
            "Scaling the process up will require keeping the bacteria warm and well fed.",
            "Other scientists cautioned that real landfills are far less friendly environments.",
            "The study was published after a two-year peer review.",
            "Funding came from a European program on circular materials.",
            "The authors now plan field trials at a recycling plant.",
        ),
    ),
    (
        "meeting",
        (
            "The team reviewed the release schedule for the mobile app.",
            "QA reported fourteen open bugs, three of them blocking.",
            "Design asked for one more week to finish the onboarding screens.",
            "Marketing wants the launch before the trade fair on the 14th.",
            "It was agreed to cut the offline mode from the first release.",
            "Support will prepare answers to the ten most likely customer questions.",
            "The next check-in is on Thursday at 10 am.",
            "Budget for contractors is nearly spent and needs approval from finance.",
        ),
    ),
    (
        "review",
        (
            "I bought this blender three months ago and use it almost every day.",
            "It crushes ice easily and the jug is simple to clean.",
            "It is louder than my old one, loud enough to wake the kids.",
            "The lid cracked after six weeks, but the seller replaced it quickly.",
            "Smoothies come out very smooth, even with frozen fruit and seeds.",
            "At this price I expected a longer cord and a better manual.",
            "Overall it does the job well and I would buy it again.",
            "The pulse button is the feature I use most.",
        ),
    ),
    (
        "story",
        (
            "Mara had lived in the lighthouse for eleven winters before the letter arrived.",
            "It came from a brother she had not seen since the war.",
            "He wrote that he was ill and wished to see the sea one last time.",
            "She spent the night repairing the old boat by lamplight.",
            "At dawn the storm had passed, and she rowed toward the harbour town.",
            "The people there remembered her mother, who had kept the light before her.",
            "Her brother was waiting on the pier, thinner but smiling.",
            "They sat together until the lamp above them turned on by itself.",
        ),
    ),
    (
        "history",
        (
            "The canal was begun in 1792 to carry coal from the hills to the coast.",
            "Thousands of labourers dug it by hand over almost twenty years.",
            "For half a century it made the towns along its banks rich.",
            "The railway arrived in 1850 and traffic on the canal collapsed.",
            "By 1900 most of its locks had been abandoned.",
            "Volunteers began restoring it in the 1970s.",
            "Today it is used mainly by holiday boats and walkers.",
            "A museum at the old basin tells the story of the workers.",
        ),
    ),
    (
        "business",
        (
            "Quarterly revenue rose 8 percent to 1.2 billion dollars.",
            "Growth came mostly from the subscription business in Asia.",
            "Hardware sales fell for the third quarter in a row.",
            "The company will close two factories and move production to partners.",
            "About 900 jobs are affected, mostly in assembly.",
            "The board approved a share buyback of 300 million dollars.",
            "Analysts expected weaker margins because of higher chip prices.",
            "Management kept its forecast for the full year unchanged.",
        ),
    ),
    (
        "health",
        (
            "Adults who slept less than six hours a night caught colds more often in the study.",
            "Participants were exposed to the virus under controlled conditions.",
            "Sleep was measured with wrist monitors for a week beforehand.",
            "The effect held after accounting for age, stress and smoking.",
            "The authors suggest sleep supports the immune response in the first days of infection.",
            "They note that the sample of 164 people was small.",
            "A larger trial is planned with older adults.",
            "Doctors recommend seven to nine hours for most adults.",
        ),
    ),
)

PEOPLE_TEXT = (
    "Dear team, please welcome Sarah Klein, who joins us from Berlin as head of design. "
    "She will work closely with Marco Rossi and with Aisha Bello on the new website.",
    "Minutes: present were Dr. Lee, Ms. Okafor and Mr. Jansen. Apologies from Paula Stein. "
    "Dr. Lee chaired; Mr. Jansen took notes.",
    "The prize went to Hiroshi Tanaka of Osaka University; the runner-up was Elena Petrova "
    "from the Moscow Institute. Both will speak at the gala in Geneva on 3 May.",
)
CONTACT_TEXT = (
    "For billing questions write to billing@northwind.example or call +1 415 555 0132. "
    "Technical support is at help@northwind.example, and the press office (Jane Wu, "
    "jane.wu@northwind.example) answers on weekdays.",
    "Hi! I moved, so my new address is 14 Rue des Lilas, 69003 Lyon, France. Reach me at "
    "paul.m@mailbox.example or +33 6 12 34 56 78; my old number 0612 345 000 no longer works.",
    "Vendors: Acme Corp (orders@acme.example, 212-555-0100), Globex (sales@globex.example) "
    "and Initech, which only takes calls at 800-555-0199.",
)
INVOICE_TEXT = (
    "INVOICE 2024-117 from Bright Paper Ltd, 3 Mill Lane, Leeds. Date: 4 March 2024. "
    "Due: 3 April 2024. 500 x A4 reams at 4.20 = 2,100.00 GBP; delivery 35.00 GBP; "
    "VAT 20% 427.00 GBP. Total 2,562.00 GBP.",
    "Order #88213 placed on 12/09/2023 by Laura Gomez. Items: 2 running shoes (89.90 each), "
    "1 water bottle (12.50). Shipping: free. Paid by card ending 4417.",
    "Receipt - Cafe Lumen, 21 Jan 2025 08:42. Flat white 3.40, croissant 2.80, orange juice "
    "3.10. Subtotal 9.30, tip 1.00, total 10.30 EUR. Table 7, served by Noor.",
)
EVENT_TEXT = (
    "Reminder: the quarterly review moves from Friday 7 June to Monday 10 June, 14:00, in "
    "room B2 of the Rotterdam office. Dial-in for remote staff stays the same.",
    "Flights booked: AMS to JFK on 2 August (KL641, departs 10:35), return JFK to AMS on "
    "16 August (KL642, departs 17:50). Hotel: The Pearl, 233 W 49th St, 14 nights.",
    "The conference runs 22-24 October in Lisbon; registration closes 30 September; the "
    "early-bird fee is 450 euros until 31 July, 600 after.",
)
CONCEPTS = (
    "an interface",
    "an abstract class",
    "a struct",
    "a thread",
    "a process",
    "a list",
    "a tuple",
    "a pointer",
    "a reference",
    "async/await",
    "a callback",
    "a closure",
    "a lambda",
    "an enum",
    "inheritance",
    "composition",
    "a mutex",
    "a generator",
    "a hash map",
    "a promise",
    "a decorator",
    "a trait",
    "a goroutine",
    "a virtual method",
)
