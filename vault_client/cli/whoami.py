"""``vault whoami``: which principal the vault sees, and what it may do (checks a credential)."""

from __future__ import annotations

import json

import click

from vault_client.cli.settings import connection_options, settings


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@connection_options()
def whoami(as_json: bool) -> None:
    """Show who the vault thinks you are and which streams you may read, write and administer.

    Run it after signing in (az login, --use-azure-credential) to check a role or a grant.
    """
    doc = settings().api().whoami()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    p = doc["principal"]
    who = {"anonymous": "anonymous (no credential)", "key": f"function key {p['id']!r}"}.get(
        p["kind"], f"{p['kind']} principal {p['id']}" + (f" ({p['name']})" if p.get("name") else "")
    )
    click.echo(f"you are: {who}")
    if p.get("app_id"):
        click.echo(f"client app: {p['app_id']}")
    if p.get("roles"):
        click.echo("app roles: " + ", ".join(p["roles"]))
    if p.get("groups"):
        click.echo("groups: " + ", ".join(p["groups"]))
    for action in ("read", "write", "admin"):
        patterns = doc["permissions"].get(action) or []
        click.echo(f"{action}: {', '.join(patterns) if patterns else '(no stream)'}")
