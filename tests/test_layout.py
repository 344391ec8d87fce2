"""The house's arrows, read from the code's own imports: no circle, and none of the
imports that must never exist (README, "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tailagent"

EXECUTOR_PARTS = (
    "turns.runtime", "turns.start", "turns.pump", "turns.applying", "answers.judging",
    "turns.permissions", "turns.restore", "answers.requester",
)  # fmt: skip
HANDLER_PARTS = (
    "requests.admission", "answers.judging", "conversations.ownership",
    "conversations.operations", "requests.peer_tasks", "requests.task_starts",
)  # fmt: skip

# (importer prefix, imported prefix, why the arrow must not exist)
FORBIDDEN = [
    ("tailagent.agents", "a2a", "agents know nothing of A2A"),
    ("tailagent.agents", "tailagent.bridge", "agents know nothing of the bridge"),
    ("tailagent.access", "tailagent.bridge", "access knows nothing of tasks"),
    ("tailagent.access", "a2a.types", "access knows nothing of tasks"),
    ("tailagent.config", "tailagent.bridge", "the settings know nothing of the bridge"),
    ("tailagent.config", "tailagent.agents", "the settings know nothing of the agents"),
    ("tailagent.workspace", "tailagent.bridge", "the worktrees know nothing of tasks"),
    ("tailagent.workspace", "a2a", "the worktrees know nothing of A2A"),
    ("tailagent.store.owners", "a2a", "a conversation's owner is a name in the store"),
    ("tailagent.store.owners", "tailagent.access", "owners are names, not callers"),
    ("tailagent.webpush", "tailagent.web", "Web Push knows nothing of the desk's pages"),
    ("tailagent.webpush", "tailagent.bridge", "Web Push hears saves; it never drives tasks"),
    ("tailagent.webpush", "tailagent.access", "a subscription's owner is a name"),
    ("tailagent.webpush.sender", "a2a", "sending a push knows nothing of tasks"),
    ("tailagent.webpush.subscriptions", "a2a", "subscriptions know nothing of tasks"),
    ("tailagent.webpush.actions", "a2a", "action tokens know nothing of tasks"),
    ("tailagent.webhooks", "tailagent.bridge", "a webhook delivers what the bridge hands it"),
    ("tailagent.store", "tailagent.bridge", "what is kept knows nothing of turns"),
    ("tailagent.store", "tailagent.cost", "the store keeps rows; what they cost is cost's"),
    (
        "tailagent.store",
        "tailagent.access",
        "the store keeps rows for an owner scope; roles are access's",
    ),
    ("tailagent.cost", "tailagent.bridge", "cost counts a turn; it knows nothing of the bridge"),
    # Inside the bridge: the executor's and the handler's parts are handed what they
    # need; none reaches back up to the class that composes it.
    *(
        (f"tailagent.bridge.{part}", "tailagent.bridge.turns.executor", "a part of the executor")
        for part in EXECUTOR_PARTS
    ),
    *(
        (f"tailagent.bridge.{part}", "tailagent.bridge.requests.handler", "a part of the handler")
        for part in HANDLER_PARTS
    ),
]

# The rooms of the house, bottom floor first: a room imports rooms on its own floor or
# below, never above (so a change low down cannot need one high up). A new room is
# given its floor here.
FLOORS = [
    ("what every room may use", {
        "agent_kinds", "config", "mends", "output", "statedir", "version"}),
    ("the box and the network: who calls, on which socket, through which tailnet", {
        "access", "listening", "process", "tailnet", "service", "sandbox"}),
    ("the work, knowing nothing of A2A", {"agents", "workspace", "webpush"}),
    ("what is kept", {"store"}),
    ("A2A's edges and the books: the card, the client, plain routes, webhooks, cost, delegation, "
     "the cluster", {
        "card", "client", "plain_routes", "webhooks", "cost", "delegation", "cluster"}),
    ("the bridge between A2A and the agent", {"bridge"}),
    ("what people use: the desk and the owner's commands", {"web", "admin"}),
    ("wiring and commands", {"app", "server", "cli", "__main__", "binary", "about"}),
]  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each tailagent module -> the modules it imports (a lazy import inside a function
    too). `from package import module` is an arrow to that module, not the package."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                inner = {f"{node.module}.{alias.name}" for alias in node.names}
                found |= (inner & set(paths)) or {node.module}
        graph[name] = found
    return graph


def test_no_module_imports_what_it_must_not() -> None:
    graph = imports()
    wrong = [
        f"{importer} imports {imported}: {why}"
        for importer, imported_set in graph.items()
        for imported in imported_set
        for prefix, banned, why in FORBIDDEN
        if (importer == prefix or importer.startswith(prefix + "."))
        and (imported == banned or imported.startswith(banned + "."))
    ]
    assert wrong == []


def test_no_circle() -> None:
    graph = imports()
    modules = set(graph)
    edges = {m: {i for i in graph[m] if i in modules and i != m} for m in modules}
    seen: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        seen[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if seen.get(target) == 1:
                pytest.fail("a circle: " + " -> ".join([*path[path.index(target) :], target]))
            if target not in seen:
                visit(target)
        path.pop()
        seen[module] = 2

    for module in sorted(modules):
        if module not in seen:
            visit(module)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node: each is a circle of rooms."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def _folders(graph: dict[str, set[str]]) -> list[str]:
    return sorted({module.rsplit(".", 1)[0] for module in graph if "." in module})


def _room_in(folder: str, module: str) -> str | None:
    """The room of `folder` (a module or a folder right inside it) that holds `module`."""
    if not module.startswith(folder + "."):
        return None
    return module[len(folder) + 1 :].split(".")[0]


def test_no_circle_between_the_rooms_of_any_folder() -> None:
    """Inside every folder, at every depth, its rooms (its modules and its folders)
    import each other one way only, so each folder has floors of its own: a reader
    learns a room from those below it, never from a room that needs it back."""
    graph = imports()
    found = []
    for folder in _folders(graph):
        edges: dict[str, set[str]] = {}
        for importer, imported_set in graph.items():
            room = _room_in(folder, importer)
            if room is None:
                continue
            for imported in imported_set:
                target = _room_in(folder, imported)
                if target is not None and target != room:
                    edges.setdefault(room, set()).add(target)
        found += [f"{folder}: {' <-> '.join(circle)}" for circle in _strongly_connected(edges)]
    assert found == []


def test_no_module_imports_a_folder_it_lives_in() -> None:
    """A folder's face (its __init__) stands above its rooms: a room that imports it
    points up, and ties itself to every sibling the face imports."""
    graph = imports()
    upward = sorted(
        f"{importer} imports {imported}"
        for importer, imported_set in graph.items()
        for imported in imported_set
        if imported in graph and importer.startswith(imported + ".")
    )
    assert upward == []


def room_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_every_import_between_rooms_goes_down_or_across() -> None:
    floor_of = {room: n for n, (_, rooms) in enumerate(FLOORS) for room in rooms}
    graph = imports()
    rooms = {room_of(module) for module in graph} - {""}
    assert sorted(rooms - set(floor_of)) == [], "a room with no floor: give it one in FLOORS"
    upward = [
        f"{importer} imports {imported}: {FLOORS[floor_of[room_of(importer)]][0]!r} is "
        f"below {FLOORS[floor_of[room_of(imported)]][0]!r}"
        for importer, imported_set in graph.items()
        if room_of(importer)
        for imported in imported_set
        if imported.startswith("tailagent.")
        and room_of(imported) in floor_of
        and floor_of[room_of(imported)] > floor_of[room_of(importer)]
    ]
    assert upward == []


def test_only_the_conversation_repos_package_face_imports_its_facade() -> None:
    """The bridge talks to `ConversationRepos`; the concerns behind it are handed git, the
    records and the lock, and never reach back to the object that composes them."""
    package = "tailagent.workspace.conversation_repos"
    reaching = sorted(
        importer
        for importer, imported in imports().items()
        if importer.startswith(package + ".") and f"{package}.facade" in imported
    )
    assert reaching == []


def test_no_class_over_300_lines_and_no_function_over_80() -> None:
    """Past these a room holds several reasons to change; split it by concern."""
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                limit = 300 if isinstance(node, ast.ClassDef) else 80
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    over.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} {lines}")
    assert over == []


FOLDER_MODULES = 15
ROOT_MODULES = 12


def test_every_folder_is_small_enough_to_find_a_room_in() -> None:
    """A newcomer reads a folder's names to find the one file to open: past 15 modules
    (12 at the package root, which keeps only the faces and the settings) a folder
    names several concepts, and one should become a room of its own."""
    crowded = []
    for folder in sorted({PACKAGE, *(p.parent for p in PACKAGE.rglob("*.py"))}):
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        limit = ROOT_MODULES if folder == PACKAGE else FOLDER_MODULES
        if len(modules) > limit:
            crowded.append(f"{folder.relative_to(PACKAGE.parent)}: {len(modules)} > {limit}")
    assert crowded == []


def _word(name: str) -> str:
    """A module name's first word, without the endings that make a near twin of it
    (answers, answering; database, databases; store, storage)."""
    word = name.split("_")[0]
    for ending in ("ing", "age", "es", "s", "e"):
        if word.endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)]
    return word


def test_no_two_modules_in_a_folder_are_near_twins() -> None:
    """Two names built on one word (`answers`, `answering`, `answer_checks`) say that
    they differ, not how: a reader must open both. Each room's names say the difference."""
    twins = []
    for folder in sorted({p.parent for p in PACKAGE.rglob("*.py")}):
        words: dict[str, list[str]] = {}
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                words.setdefault(_word(path.stem), []).append(path.stem)
        twins += [
            f"{folder.relative_to(PACKAGE)}: {names}" for names in words.values() if len(names) > 1
        ]
    assert twins == []


def test_every_logger_is_named_for_its_module_or_a_room_it_is_in() -> None:
    """A log line's name leads to the code that wrote it: `__name__`, or the name of a
    room the module lives in when the room speaks with one voice (`tailagent.sandbox`,
    `tailagent.access`), never a module that moved away."""
    astray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("tailagent")
            ):
                name = str(node.args[0].value)
                if module != name and not module.startswith(name + "."):
                    astray.append(f"{module}: {name}")
    assert astray == []
