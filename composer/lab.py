"""What `make lab` hands JupyterLab: notebooks keep their outputs on disk, and `git status` stays clean.

    jupyter lab --FileContentsManager.post_save_hook=composer.lab.post_save notebooks/   # what make lab runs

    from composer import lab
    lab.refresh(Path("notebooks/005-integrated-trainer-skeleton.ipynb"))   # True: only outputs changed, index updated

git stores every notebook through nbstripout (make install's notebook-filter), so a notebook run and saved has the
same blob as the committed one. But git judges a file whose size changed as modified before it runs any filter, so
`git status` would list the notebook with an empty diff. After each save, where the file as git would store it
(`git hash-object` applies the filter) is the blob the index already holds, the index entry is refreshed (`git add`
stores that same blob); a real edit is left for the researcher to stage, as without the hook.
"""

import subprocess
from pathlib import Path


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True)


def refresh(path: Path) -> bool:
    """Refresh the index entry of the notebook at `path` when git would store it unchanged (see the module doc);
    whether it did. Untracked files, files outside a git checkout and real edits are left as they are."""
    path = Path(path).resolve()
    staged = _git(path.parent, "ls-files", "-s", "--", path.name)
    stored = _git(path.parent, "hash-object", f"--path={path.name}", "--", path.name)
    if staged.returncode or stored.returncode or not staged.stdout.strip():
        return False
    blob = staged.stdout.split()[1]  # "<mode> <blob> <stage>\t<path>"
    if stored.stdout.strip() != blob:
        return False
    return _git(path.parent, "add", "--", path.name).returncode == 0


def post_save(os_path: str, model: dict, contents_manager=None, **_) -> None:
    """jupyter_server's post_save_hook: refresh a saved notebook's index entry (refresh)."""
    if model.get("type") == "notebook":
        refresh(Path(os_path))
