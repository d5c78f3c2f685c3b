"""Single sign-on in a real browser (Debian's chromium driven by Playwright): the chat sends a
signed-out person to the OpenID provider (a real one, run by the test), its authorize form
signs them in, and they land back in the chat signed in, send a message, see the echo, and
sign out."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from gateway.http.webauth import COOKIE
from tests.integration.http.test_browser import TIMEOUT_MS, _record_errors, browser
from tests.integration.http.test_oidc import oidc_gateway, provider, set_user

__all__ = ["browser", "provider"]  # the fixtures, shared with test_browser and test_oidc


async def test_sign_in_at_the_provider_chat_and_sign_out(
    database_url: str, browser: Browser, provider: str
) -> None:
    await set_user(provider, "sub-zoe", email="zoe@example.com", email_verified=True, name="Zoe Z")
    async with oidc_gateway(database_url, provider) as gw:
        context = await browser.new_context()
        # the provider's page styles itself from a CDN: the test stays offline
        await context.route("https://cdn.jsdelivr.net/**", lambda route: route.abort())
        page = await context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(page, errors)
        try:
            await page.goto(gw.url)
            # /login sent the browser on to the provider's authorize form
            await page.wait_for_url(f"{provider}/oauth2/authorize?**")
            await page.fill("input[name=sub]", "sub-zoe")
            await page.click("button[type=submit]:has-text('Authorize')")
            await page.wait_for_url(gw.url)
            await expect(page.locator("#me")).to_have_text("zoe")
            [cookie] = [c for c in await context.cookies() if c["name"] == COOKIE]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

            await page.fill("#text", "hello from sso")
            await page.press("#text", "Enter")
            reply = page.locator(".msg.assistant .body", has_text="echo: hello from sso")
            await expect(reply).to_be_visible()
            await expect(page.locator(".msg.user .who").first).to_have_text("zoe")
            assert errors == []

            # sign out: a "signed out" page, not an instant sign-in again at the provider
            await page.click("#sign-out")
            await page.wait_for_url("**/login?signed_out=1")
            await expect(page.locator("h1")).to_have_text("Signed out")
            me = await page.request.get(f"{gw.url}web/api/me")
            assert me.status == 401
        finally:
            await context.close()
