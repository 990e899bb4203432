#!/usr/bin/env bash
# Install the built bundle as a desktop app for the current user: a command in
# ~/.local/bin, the menu entry, the icons (hicolor theme) and the AppStream file under
# ${XDG_DATA_HOME:-~/.local/share}. `--uninstall` removes them again (the bundle and the
# data directory stay). Works from a clone (after `make package`) and from a copied bundle
# (dist/lmsp-desktop/share/install-desktop.sh).
#
#   bash packaging/install-desktop.sh [BUNDLE_DIR]      # default: dist/lmsp-desktop
#   bash packaging/install-desktop.sh --uninstall
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}"
BIN_DIR="${LMSP_BIN_DIR:-$HOME/.local/bin}"
APP_ID="io.github.lmsp_desktop.LmspDesktop"
SIZES="16 24 32 48 64 128 256 512"

refresh_caches() {
    # Menus and icon themes pick the files up without these too, just later.
    command -v update-desktop-database >/dev/null && update-desktop-database -q "$DATA_HOME/applications" || true
    command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$DATA_HOME/icons/hicolor" 2>/dev/null || true
}

if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$BIN_DIR/lmsp-desktop" "$DATA_HOME/applications/lmsp-desktop.desktop" \
        "$DATA_HOME/metainfo/$APP_ID.metainfo.xml" \
        "$DATA_HOME/icons/hicolor/scalable/apps/lmsp-desktop.svg"
    for s in $SIZES; do rm -f "$DATA_HOME/icons/hicolor/${s}x${s}/apps/lmsp-desktop.png"; done
    refresh_caches
    echo "LMSP Desktop removed from the menu (the bundle and your data are untouched)."
    exit 0
fi

# Files come from the repository (packaging/ and resources/) or from a bundle's share/.
if [ -f "$HERE/../resources/icons/lmsp-desktop.svg" ]; then
    ROOT="$(cd "$HERE/.." && pwd)"
    BUNDLE="$(cd "${1:-$ROOT/dist/lmsp-desktop}" 2>/dev/null && pwd)" || {
        echo "install-desktop.sh: no bundle at ${1:-$ROOT/dist/lmsp-desktop}; run 'make package' first" >&2
        exit 1
    }
    DESKTOP="$ROOT/packaging/lmsp-desktop.desktop"
    METAINFO="$ROOT/packaging/$APP_ID.metainfo.xml"
    ICONS="$ROOT/resources/icons/png"
    SVG="$ROOT/resources/icons/lmsp-desktop.svg"
else
    BUNDLE="$(cd "${1:-$HERE/..}" && pwd)"
    DESKTOP="$HERE/lmsp-desktop.desktop"
    METAINFO="$HERE/$APP_ID.metainfo.xml"
    ICONS="$HERE/icons"
    SVG="$HERE/icons/lmsp-desktop.svg"
fi
EXE="$BUNDLE/lmsp-desktop"
[ -x "$EXE" ] || { echo "install-desktop.sh: $EXE is not an executable bundle" >&2; exit 1; }

mkdir -p "$BIN_DIR"
ln -sfn "$EXE" "$BIN_DIR/lmsp-desktop"
# The menu entry runs the bundle by its absolute path (quoted: it may contain spaces), so it
# works even when ~/.local/bin is not on the desktop session's PATH.
mkdir -p "$DATA_HOME/applications"
sed -e "s|^Exec=.*|Exec=\"$EXE\"|" -e "s|^TryExec=.*|TryExec=$EXE|" "$DESKTOP" \
    >"$DATA_HOME/applications/lmsp-desktop.desktop"
chmod 644 "$DATA_HOME/applications/lmsp-desktop.desktop"
for s in $SIZES; do
    install -Dm644 "$ICONS/lmsp-desktop-$s.png" "$DATA_HOME/icons/hicolor/${s}x${s}/apps/lmsp-desktop.png"
done
install -Dm644 "$SVG" "$DATA_HOME/icons/hicolor/scalable/apps/lmsp-desktop.svg"
install -Dm644 "$METAINFO" "$DATA_HOME/metainfo/$APP_ID.metainfo.xml"
refresh_caches
echo "Installed: LMSP Desktop is in your applications menu; 'lmsp-desktop' runs $EXE"
case ":$PATH:" in *":$BIN_DIR:"*) ;; *) echo "Note: $BIN_DIR is not on your PATH." ;; esac
