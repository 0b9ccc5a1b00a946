"""Grant, revoke and list roles from the command line.

    manage.py roles grant payne expert rater
    manage.py roles revoke payne rater
    manage.py roles list [payne ...]

Changes go through the same service as the roles page and are recorded in the audit log (with no
actor: the command line).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from annotation.core import errors as core_errors
from annotation.core import services as core_services
from annotation.core.roles import Role, accounts_with_roles, parse_role, user_roles


class Command(BaseCommand):
    help = (
        "Grant, revoke or list the roles of accounts (expert, rater, ml_engineer, viewer, staff)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        for name, text in (("grant", "give roles"), ("revoke", "take roles away")):
            sub = actions.add_parser(name, help=f"{text} to an account")
            sub.add_argument("username")
            sub.add_argument("roles", nargs="+", help=", ".join(role.value for role in Role))
        listing = actions.add_parser("list", help="accounts and their roles")
        listing.add_argument("usernames", nargs="*", help="only these accounts")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            self._list(options["usernames"])
            return
        user = self._user(options["username"])
        try:
            roles = [parse_role(text) for text in options["roles"]]
        except ValueError as error:
            raise CommandError(str(error)) from error
        held = set(user_roles(user))
        wanted = held | set(roles) if options["action"] == "grant" else held - set(roles)
        try:
            granted, revoked = core_services.user_roles_set(user=user, roles=wanted, actor=None)
        except core_errors.NotAllowed as error:
            raise CommandError(str(error)) from error
        changed = [f"+{r.value}" for r in granted] + [f"-{r.value}" for r in revoked]
        self.stdout.write(f"{user.get_username()}: {', '.join(changed) or 'no change'}")
        self._list([user.get_username()])

    def _user(self, username: str) -> Any:
        try:
            return get_user_model().objects.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no account named {username!r}") from None

    def _list(self, usernames: list[str]) -> None:
        users = accounts_with_roles()
        if usernames:
            missing = set(usernames) - set(
                users.filter(username__in=usernames).values_list("username", flat=True)
            )
            if missing:
                raise CommandError(f"no account named {', '.join(sorted(missing))}")
            users = users.filter(username__in=usernames)
        for user in users:
            roles = ", ".join(sorted(role.value for role in user_roles(user))) or "no role"
            inactive = " (inactive)" if not user.is_active else ""
            self.stdout.write(f"{user.get_username()}{inactive}: {roles}")
