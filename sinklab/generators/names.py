"""Names for the `name` field kind: a small fixed list keeps output deterministic without faker."""

TITLES = ("Mr.", "Mrs.", "Ms.", "Miss", "Dr.")

FIRST = (
    "Aniya", "Juanita", "Nella", "Aiden", "Amara", "Bruno", "Camila", "Chen", "Dalia", "Diego", "Elena", "Emeka",
    "Farah", "Felix", "Greta", "Hana", "Hugo", "Ines", "Ivan", "Jamal", "Jonas", "Kai", "Keiko", "Lars", "Leila",
    "Liam", "Lucia", "Malik", "Maren", "Mateo", "Mei", "Nadia", "Noah", "Olga", "Omar", "Priya", "Quinn", "Rafael",
    "Rosa", "Sami", "Sofia", "Tariq", "Thea", "Tomas", "Uma", "Victor", "Wanda", "Xavier", "Yara", "Yusuf", "Zoe",
    "Anders", "Beatriz", "Colm", "Dara", "Esther", "Goran", "Ingrid", "Kofi", "Lena",
)

LAST = (
    "Rath", "Hermiston", "Mante", "Abbott", "Bauer", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad",
    "Ivanova", "Jansen", "Kowalski", "Larsen", "Moreau", "Nakamura", "Okafor", "Petrov", "Quispe", "Rossi",
    "Schmidt", "Tanaka", "Underwood", "Varga", "Weber", "Xu", "Yilmaz", "Zhang", "Novak", "Olsen", "Popescu",
    "Reyes", "Silva", "Torres", "Ueda", "Vogel", "Walsh", "Young", "Ziegler", "Andersson", "Brennan", "Costa",
    "Da Silva", "Esposito", "Fontaine", "Gomez", "Horvat", "Ito", "Jovanovic", "Kim", "Lindqvist", "Murphy",
    "Nielsen", "O'Brien", "Pereira", "Ramos", "Sato", "Thompson", "Wagner",
)
