"""The Clients page over the real pairing manager and client storage."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage import clients
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.dialogs.pair_dialog import PairDialog
from lmsp_desktop.gui.models.client_table import COL_NAME, COL_SCOPES, ClientTableModel
from lmsp_desktop.gui.pages.clients_page import ClientsPage
from tests.support.polling import until

pytestmark = pytest.mark.gui


@pytest.fixture
async def page(qtbot, core):
    bridge = CoreBridge(core, interval_ms=20)
    widget = ClientsPage(core)
    qtbot.addWidget(widget)
    bridge.pairing_changed.connect(widget.on_pairing_changed)
    await widget.load()
    widget.show()
    yield widget
    # As the window does before the core stops (MainWindow.stop_updates): the page's
    # two-second look, or its reload after an answer, may still be reading when the store
    # closes; nothing went wrong for the user then.
    aio.closing()
    bridge.close()


async def test_pairing_card_approve_with_fewer_scopes_gives_the_client_its_token(page):
    counts: list[int] = []
    page.pending_changed.connect(counts.append)
    start = await page.core.pairing.start(
        "laptop", frozenset({"responses:read", "responses:write"}), "192.168.1.7"
    )
    await until(lambda: len(page.cards) == 1, what="card")
    card = page.cards[0]
    assert card.code.text() == start["user_code"]
    assert "192.168.1.7" in card.findChildren(type(card.code))[0].text()
    assert card.countdown.text().startswith("Expires in 4:5")
    assert counts[-1] == 1
    card.scopes["responses:write"].setChecked(False)
    card.approve.click()
    await until(lambda: not page.cards, what="card answered")
    answer = await page.core.pairing.poll(start["pairing_id"], start["pairing_secret"])
    assert answer["scopes"] == ["responses:read"]
    await until(lambda: page.model.rowCount() == 1, what="client row")
    assert page.model.index(0, COL_NAME).data() == "laptop"
    assert counts[-1] == 0


async def test_deny_tells_the_client(page):
    start = await page.core.pairing.start("phone", frozenset({"models:read"}), None)
    await until(lambda: len(page.cards) == 1)
    page.cards[0].deny.click()
    await until(lambda: not page.cards)
    with pytest.raises(LmspError) as info:
        await page.core.pairing.poll(start["pairing_id"], start["pairing_secret"])
    assert getattr(info.value, "code", "") == "access_denied"


async def test_revoke_after_confirmation_and_edit_scopes(qtmodeltester, page, store):
    client, _token = await clients.create_client(store.db, "ci-bot", frozenset({"admin"}))
    await page.model.reload()
    tested = ClientTableModel(page.core)
    await tested.reload()
    qtmodeltester.check(tested, force_py=True)
    page.table.selectRow(0)
    page.edit_scopes()
    page.dialog.boxes["admin"].setChecked(False)
    page.dialog.boxes["models:read"].setChecked(True)
    page.dialog.accept()
    await until(lambda: page.model.index(0, COL_SCOPES).data() == "models:read")
    page.table.selectRow(0)
    page.confirm_revoke()
    assert "Revoke ci-bot?" in page.dialog.text()
    page.dialog.buttons()[0].click()
    await until(lambda: page.model.rowCount() == 0)
    assert (await clients.get_client(store.db, client["id"]))["revoked"]


async def test_pair_dialog_shows_a_code_that_a_client_can_claim(qtbot, core):
    pairing = core.pairing
    dialog = PairDialog(core, "http://127.0.0.1:5677")
    qtbot.addWidget(dialog)
    await dialog.new_code()
    code = dialog.code_label.text()
    assert len(code) == 9 and code[4] == "-"
    assert dialog.qr.isHidden()  # loopback only: no other device could use it
    assert "Other devices cannot reach" in dialog.network_note.text()
    assert 'base_url="http://127.0.0.1:5677/v1"' in dialog.snippet.toPlainText()
    assert code in dialog.snippet.toPlainText()
    assert dialog.expiry.text().startswith("Works once")
    answer = await pairing.claim(code, "notebook", "127.0.0.1")
    assert answer["scopes"] == ["models:read", "responses:read", "responses:write"]


async def test_pair_dialog_on_the_network_without_a_known_address_says_so(qtbot, core, monkeypatch):
    from lmsp_desktop.gui import addresses

    monkeypatch.setattr(addresses, "lan_address", lambda: None)  # no route to find it
    dialog = PairDialog(core, "http://0.0.0.0:5677", host="0.0.0.0")
    qtbot.addWidget(dialog)
    await dialog.new_code()
    note = dialog.network_note.text()
    assert "cannot reach" not in note and "this computer only" not in note
    assert "http://ADDRESS:5677/v1" in note
    assert dialog.qr.isHidden()
