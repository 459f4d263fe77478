"""The built-in English -> Spanish corpus, generated from a small grammar.

Built around the seed's example, "the black cat sleeps" -> "el gato negro
duerme", it exercises what makes translation more than word lookup:
- articles agree with the noun's gender and number (el/la/los/las, un/una),
- adjectives follow the noun and agree with it (negro/negra/negros/negras),
- verbs agree with their subject (duerme/duermen),
- animate objects take the personal "a" (a + el = "al"), places take
  prepositions that contract (de + el = "del"),
- relative clauses put the main verb far from the subject it agrees with:
  "the cats that the girl sees sleep" -> "los gatos que la niña ve duermen".

A harder mode (`builtin_splits(harder=True)`) puts half the sentences in the
past tense, where English verbs no longer show their number ("slept") and
Spanish ones still do ("durmió", "durmieron"); chapter 5 of the course
trains on it.

Deterministic from a seed. The test split is compositional: each test
sentence contains an adjective-noun pair that no training or validation
sentence contains, while every word on its own is seen in training.
"""

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Noun:
    english: str
    english_plural: str
    spanish: str
    spanish_plural: str
    feminine: bool
    animate: bool


@dataclass(frozen=True)
class Adjective:
    english: str
    masculine: str
    feminine: str
    masculine_plural: str
    feminine_plural: str

    def agree(self, noun, plural):
        if plural:
            return self.feminine_plural if noun.feminine else self.masculine_plural
        return self.feminine if noun.feminine else self.masculine


@dataclass(frozen=True)
class Verb:
    english: str  # third person singular
    english_plural: str
    spanish: str
    spanish_plural: str
    english_past: str  # one form for both numbers: "the cat slept", "the cats slept"
    spanish_past: str
    spanish_past_plural: str


def _nouns(rows, animate):
    return [Noun(*row.split(), feminine=gender == "f", animate=animate) for row, gender in rows]


ANIMATE = _nouns(
    [
        ("cat cats gato gatos", "m"),
        ("dog dogs perro perros", "m"),
        ("bird birds pájaro pájaros", "m"),
        ("horse horses caballo caballos", "m"),
        ("boy boys niño niños", "m"),
        ("man men hombre hombres", "m"),
        ("mouse mice ratón ratones", "m"),
        ("duck ducks pato patos", "m"),
        ("girl girls niña niñas", "f"),
        ("woman women mujer mujeres", "f"),
        ("cow cows vaca vacas", "f"),
        ("hen hens gallina gallinas", "f"),
        ("goat goats cabra cabras", "f"),
        ("frog frogs rana ranas", "f"),
    ],
    animate=True,
)
THINGS = _nouns(
    [
        ("book books libro libros", "m"),
        ("car cars coche coches", "m"),
        ("hat hats sombrero sombreros", "m"),
        ("apple apples manzana manzanas", "f"),
        ("ball balls pelota pelotas", "f"),
        ("letter letters carta cartas", "f"),
        ("flower flowers flor flores", "f"),
        ("key keys llave llaves", "f"),
        ("box boxes caja cajas", "f"),
    ],
    animate=False,
)
PLACES = _nouns(
    [
        ("garden gardens jardín jardines", "m"),
        ("tree trees árbol árboles", "m"),
        ("river rivers río ríos", "m"),
        ("park parks parque parques", "m"),
        ("house houses casa casas", "f"),
        ("table tables mesa mesas", "f"),
        ("bed beds cama camas", "f"),
        ("door doors puerta puertas", "f"),
        ("window windows ventana ventanas", "f"),
    ],
    animate=False,
)
ADJECTIVES = [
    Adjective(*row.split())
    for row in [
        "black negro negra negros negras",
        "white blanco blanca blancos blancas",
        "red rojo roja rojos rojas",
        "small pequeño pequeña pequeños pequeñas",
        "big grande grande grandes grandes",
        "old viejo vieja viejos viejas",
        "new nuevo nueva nuevos nuevas",
        "happy feliz feliz felices felices",
        "tired cansado cansada cansados cansadas",
        "fast rápido rápida rápidos rápidas",
        "tall alto alta altos altas",
        "pretty bonito bonita bonitos bonitas",
        "young joven joven jóvenes jóvenes",
        "green verde verde verdes verdes",
    ]
]
INTRANSITIVE = [
    Verb(*row.split())
    for row in [
        "sleeps sleep duerme duermen slept durmió durmieron",
        "runs run corre corren ran corrió corrieron",
        "eats eat come comen ate comió comieron",
        "sings sing canta cantan sang cantó cantaron",
        "walks walk camina caminan walked caminó caminaron",
        "jumps jump salta saltan jumped saltó saltaron",
        "swims swim nada nadan swam nadó nadaron",
        "waits wait espera esperan waited esperó esperaron",
        "plays play juega juegan played jugó jugaron",
        "dances dance baila bailan danced bailó bailaron",
    ]
]
TRANSITIVE = [
    Verb(*row.split())
    for row in [
        "sees see ve ven saw vio vieron",
        "watches watch mira miran watched miró miraron",
        "finds find encuentra encuentran found encontró encontraron",
        "follows follow sigue siguen followed siguió siguieron",
        "wants want quiere quieren wanted quería querían",  # want and have: the imperfect, as Spanish says them
        "has have tiene tienen had tenía tenían",
        "carries carry lleva llevan carried llevó llevaron",
    ]
]
# English preposition -> Spanish, and whether the Spanish ends in "de" (de + el = del).
PREPOSITIONS = [("in", "en"), ("on", "sobre"), ("near", "cerca de"), ("under", "debajo de"), ("behind", "detrás de")]
# English determiner (singular, plural) -> Spanish (m, f, m plural, f plural).
DETERMINERS = [
    (("the", "the"), ("el", "la", "los", "las")),
    (("a", "some"), ("un", "una", "unos", "unas")),
    (("this", "these"), ("este", "esta", "estos", "estas")),
    (("my", "my"), ("mi", "mi", "mis", "mis")),
]

SEED_SENTENCES = ["the black cat sleeps", "the cats that the girl sees sleep"]


@dataclass(frozen=True)
class _Phrase:
    english: str
    spanish: str
    noun: Noun
    plural: bool
    adjective: Adjective | None


def _noun_phrase(rng, nouns, adjective_rate=0.5):
    noun = rng.choice(nouns)
    plural = rng.random() < 0.4
    (en_sg, en_pl), spanish_forms = rng.choice(DETERMINERS)
    english_det = en_pl if plural else en_sg
    spanish_det = spanish_forms[2 * plural + noun.feminine]
    english_noun = noun.english_plural if plural else noun.english
    spanish_noun = noun.spanish_plural if plural else noun.spanish
    adjective = rng.choice(ADJECTIVES) if rng.random() < adjective_rate else None
    if adjective is not None:
        english_noun = f"{adjective.english} {english_noun}"
        spanish_noun = f"{spanish_noun} {adjective.agree(noun, plural)}"
    return _Phrase(f"{english_det} {english_noun}", f"{spanish_det} {spanish_noun}", noun, plural, adjective)


def _after(spanish_word, phrase):
    """Joins a preposition and a phrase: a + el -> al, de + el -> del."""
    if spanish_word in ("a", "de") and phrase.spanish.startswith("el "):
        return f"{spanish_word}l {phrase.spanish[3:]}"
    return f"{spanish_word} {phrase.spanish}"


def _object(rng):
    phrase = _noun_phrase(rng, ANIMATE + THINGS)
    spanish = _after("a", phrase) if phrase.noun.animate else phrase.spanish
    return phrase, spanish


def _verb(verb, subject, past=False):
    if past:
        return verb.english_past, verb.spanish_past_plural if subject.plural else verb.spanish_past
    return (verb.english_plural, verb.spanish_plural) if subject.plural else (verb.english, verb.spanish)


def _sentence(rng, harder=False):
    """One (english, spanish, phrases) triple from a random template; `harder`: half of them in the past tense."""
    past = harder and rng.random() < 0.5
    subject = _noun_phrase(rng, ANIMATE)
    phrases = [subject]
    template = rng.choice(["intransitive", "transitive", "subject_relative", "object_relative"])
    english, spanish = [subject.english], [subject.spanish]
    if template in ("transitive", "subject_relative"):  # the cat sees the dogs / the cat that sees the dogs sleeps
        verb = rng.choice(TRANSITIVE)
        obj, obj_spanish = _object(rng)
        en_verb, es_verb = _verb(verb, subject, past)
        relative = template == "subject_relative"
        english += ["that"] * relative + [en_verb, obj.english]
        spanish += ["que"] * relative + [es_verb, obj_spanish]
        phrases.append(obj)
    elif template == "object_relative":  # the cats that the girl sees sleep
        inner = _noun_phrase(rng, ANIMATE)
        en_verb, es_verb = _verb(rng.choice(TRANSITIVE), inner, past)
        english += ["that", inner.english, en_verb]
        spanish += ["que", inner.spanish, es_verb]
        phrases.append(inner)
    if template != "transitive":
        en_verb, es_verb = _verb(rng.choice(INTRANSITIVE), subject, past)
        english.append(en_verb)
        spanish.append(es_verb)
    if rng.random() < 0.4:
        english_preposition, spanish_preposition = rng.choice(PREPOSITIONS)
        place = _noun_phrase(rng, PLACES, adjective_rate=0.3)
        english += [english_preposition, place.english]
        words = spanish_preposition.split()
        spanish += [*words[:-1], _after(words[-1], place)]
        phrases.append(place)
    return " ".join(english), " ".join(spanish), phrases


def held_out_pairs(seed=0):
    """The (adjective, noun) pairs reserved for the test split: one per noun."""
    rng = random.Random(f"held-out-{seed}")
    return {(rng.choice(ADJECTIVES).english, noun.english) for noun in ANIMATE + THINGS + PLACES}


def _holds_held_out(phrases, held_out):
    """Whether any of the noun phrases pairs an adjective with a noun that `held_out` reserves."""
    return any(p.adjective and (p.adjective.english, p.noun.english) in held_out for p in phrases)


def builtin_splits(seed=0, train_size=20_000, valid_size=500, test_size=1_000, harder=False):
    """The built-in corpus as {"train", "valid", "test"} lists of (english, spanish).

    All sentences are distinct. Train and valid never contain a held-out
    adjective-noun pair; every test sentence contains at least one.

    `harder` puts half the sentences in the past tense, where English verbs
    hide their number ("the cat slept", "the cats slept") and Spanish verbs
    show it ("durmió", "durmieron"): the translator has to carry the
    subject's number to the verb, across a relative clause's noun of the
    other number when there is one.
    """
    rng = random.Random(seed)
    held_out = held_out_pairs(seed)
    seen = set()
    splits = {"train": [], "valid": [], "test": []}
    sizes = {"train": train_size, "valid": valid_size, "test": test_size}
    while any(len(splits[name]) < sizes[name] for name in splits):
        english, spanish, phrases = _sentence(rng, harder)
        if english in seen:
            continue
        seen.add(english)
        if _holds_held_out(phrases, held_out):
            name = "test"
        else:
            name = "valid" if len(splits["valid"]) < valid_size and rng.random() < 0.05 else "train"
        if len(splits[name]) < sizes[name]:
            splits[name].append((english, spanish))
    return splits


def role_swap_pairs(count=200, seed=0, exclude=()):
    """Sentences whose subject and object trade places: the same words, another meaning.

    "the dog sees a cat" -> "el perro ve a un gato" and "a cat sees the dog"
    -> "un gato ve al perro" use exactly the same English words, so a model
    that cannot see word order must give both the same translation, and so
    gets at most one of the two right. Subject and object are animate and
    agree in number (the verb form is the same in both orders), and no
    sentence holds a held-out adjective-noun pair.

    Args:
        count: how many swapped pairs to make.
        exclude: English sentences to leave out (a training split, say).

    Returns:
        A list of 2 * count (english, spanish) pairs: each sentence followed
        by its swapped twin.
    """
    rng = random.Random(f"role-swap-{seed}")
    held_out = held_out_pairs(seed)
    taken = set(exclude)
    pairs = []
    while len(pairs) < 2 * count:
        first, second = _noun_phrase(rng, ANIMATE), _noun_phrase(rng, ANIMATE)
        if first.plural != second.plural or first.noun == second.noun or _holds_held_out((first, second), held_out):
            continue
        english_verb, spanish_verb = _verb(rng.choice(TRANSITIVE), first)
        twins = [
            (f"{a.english} {english_verb} {b.english}", f"{a.spanish} {spanish_verb} {_after('a', b)}")
            for a, b in ((first, second), (second, first))
        ]
        if any(english in taken for english, _ in twins):
            continue
        taken.update(english for english, _ in twins)
        pairs += twins
    return pairs


def agreement_pairs(count=200, seed=0, exclude=(), past=False):
    """Object-relative sentences whose main verb agrees with a distant subject across a noun of the other number.

    "the cats that the girl sees sleep" -> "los gatos que la niña ve duermen":
    between "cats" and "sleep" stands "girl", singular, an attractor. A model
    that agrees the verb with the nearest noun writes "duerme". No sentence
    holds a held-out adjective-noun pair. In the present tense the English
    main verb shows its number too ("sleep", not "sleeps"), next to where the
    Spanish verb goes, so a translator can copy the number instead of
    carrying it across the clause: these sentences test attraction, not
    memory over distance. In the past tense (`past=True`, the harder
    corpus's) the English verbs hide it: "the cats that the girl saw slept"
    -> "... durmieron", and only "cats" tells the number.

    Args:
        count: how many sentences.
        exclude: English sentences to leave out (a training split, say).
        past: both verbs in the past tense.

    Returns:
        A list of `count` tuples (english, spanish, right, wrong): `right` is
        the Spanish main verb and `wrong` the same verb in the attractor's
        number.
    """
    rng = random.Random(f"agreement-{seed}-past" if past else f"agreement-{seed}")
    held_out = held_out_pairs(seed)
    taken = set(exclude)
    sentences = []
    while len(sentences) < count:
        subject, inner = _noun_phrase(rng, ANIMATE), _noun_phrase(rng, ANIMATE)
        if subject.plural == inner.plural or _holds_held_out((subject, inner), held_out):
            continue
        inner_english, inner_spanish = _verb(rng.choice(TRANSITIVE), inner, past)
        verb = rng.choice(INTRANSITIVE)
        main_english, right = _verb(verb, subject, past)
        _, wrong = _verb(verb, inner, past)
        english = f"{subject.english} that {inner.english} {inner_english} {main_english}"
        if english in taken:
            continue
        taken.add(english)
        sentences.append((english, f"{subject.spanish} que {inner.spanish} {inner_spanish} {right}", right, wrong))
    return sentences
