"""What the person uploading a file declares about it when the file does not say: the role of
each column of a text table, and the wavelength frame (air or vacuum)."""

from __future__ import annotations

from dataclasses import dataclass

COLUMN_ROLES = ("wavelength", "flux", "ab_mag", "error", "ivar", "mask", "ignore")
FRAMES = ("air", "vacuum")
COLUMNS_HELP = (
    "The role of each column of a text table, in file order, separated by commas: wavelength, "
    "flux, ab_mag (AB magnitudes, converted to flux), error (1-sigma, in magnitudes beside "
    "ab_mag), ivar, mask or ignore; the wavelength may carry its unit, e.g. "
    "'wavelength[nm], flux, ignore', and an IRAF onedstds standard is "
    "'wavelength, ab_mag, ignore'. Overrides the table's header line."
)


class DeclarationError(ValueError):
    """A declaration that cannot be used; the message says what is accepted."""


@dataclass(frozen=True)
class Declared:
    columns: tuple[str, ...] | None = None  # roles in file order; "wavelength[nm]" keeps a unit
    frame: str | None = None  # "air" or "vacuum"

    def __post_init__(self) -> None:
        if self.frame is not None and self.frame not in FRAMES:
            raise DeclarationError(f"wavelength frame {self.frame!r} is neither 'air' nor 'vacuum'")
        if self.columns is not None:
            # built in code (not parsed from a form), the roles are checked as parse_columns
            # checks them: a declaration without a flux or ab_mag column once reached the
            # table reader and escaped it as a bare StopIteration
            check_roles(self.columns, ", ".join(self.columns))


def parse_columns(text: str) -> tuple[str, ...] | None:
    """('wavelength[nm]', 'flux', 'ignore') from 'wavelength[nm], flux, ignore'; None if blank."""
    if not text.strip():
        return None
    roles = tuple(part.strip().lower() for part in text.split(","))
    check_roles(roles, text)
    return roles


def check_roles(roles: tuple[str, ...], text: str) -> None:
    """Raise DeclarationError unless ``roles`` name known roles, exactly one wavelength and
    exactly one flux or ab_mag column, no ivar beside ab_mag and no role twice."""
    for role in roles:
        if role.split("[", 1)[0].strip() not in COLUMN_ROLES:
            raise DeclarationError(f"column role {role!r} is not one of {', '.join(COLUMN_ROLES)}")
    named = [role.split("[", 1)[0].strip() for role in roles]
    if named.count("wavelength") != 1:
        raise DeclarationError(
            f"declare exactly one 'wavelength' column; got {named.count('wavelength')} in {text!r}"
        )
    spectra = named.count("flux") + named.count("ab_mag")
    if spectra != 1:
        raise DeclarationError(
            "declare exactly one 'flux' or 'ab_mag' (AB magnitude) column; got "
            f"{spectra} in {text!r}"
        )
    if "ab_mag" in named and "ivar" in named:
        raise DeclarationError(
            "'ivar' beside 'ab_mag' is not read; give the magnitudes' 1-sigma error as 'error'"
        )
    repeated = sorted({r for r in named if r != "ignore" and named.count(r) > 1})
    if repeated:
        raise DeclarationError(f"more than one column declared as {repeated}")


def parse_frame(text: str) -> str | None:
    value = text.strip().lower()
    if not value:
        return None
    if value in ("vac", "vacuum"):
        return "vacuum"
    if value == "air":
        return "air"
    raise DeclarationError(f"wavelength frame {text!r} is neither 'air' nor 'vacuum'")
