"""Tests for composer.env.embedded.library: the bug-free modules the task generator mutates, and their expectations."""



from composer.env.embedded import library, tasks


def test_library_expectations_are_plain_literals():
    for module, (pkg, _, _, cases) in library.LIBRARY.items():
        assert list(cases) == list(library.units(module))  # every unit has cases, in order
        text, _ = tasks._test_file(pkg, module, list(cases))  # asserts repr round-trips
        compile(text, module, "exec")


def test_library_sources_are_the_bug_free_modules():
    sources = tasks.library_sources()
    assert set(sources) == {f"{pkg}/{m}.py" for m, (pkg, *_) in library.LIBRARY.items()}
    for path, text in sources.items():
        compile(text, path, "exec")
        module = path.rsplit("/", 1)[1].removesuffix(".py")
        assert all(unit in text for unit in library.units(module).values())
