"""A corpus of realistic (made-up, correctly shaped) credentials, each in a natural sentence.

Every ``Secret.value`` occurs in its ``sentence``; the corpus tests send the
sentences through every write path and then look for the values in every text
column of the database. ``ORDINARY`` holds conversation that must pass the
screen untouched (dates, prices, phone and order numbers, years, the word
"password" without a value).

None of these values is a live credential: they are random strings in the
shape of each provider's tokens, and the card numbers are Luhn-valid test
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CORPUS", "ORDINARY", "Secret"]


@dataclass(frozen=True, slots=True)
class Secret:
    name: str
    value: str
    sentence: str

    def __post_init__(self) -> None:
        assert self.value in self.sentence, self.name


_PEM_RSA = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAq7BFUpkGp3+LQmlQYx2eqzDV+xeG8kx/sQFV18S5JhzGeIJQ\n"
    "xh7UTjCXeVdTGJqcNdPGg1RroPbQqXbbtANpEQmnBwKaKaSEeXRo2PABtBNv7FEa\n"
    "3qV+1xV2j6k1RxCGbPh9Kla2TLX2KbBc9rhHpyNoF3dE6EXvPzCAH0T7vFlfKx0Q\n"
    "-----END RSA PRIVATE KEY-----"
)
_OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBvT3k7m0nYv4c8t1sP2Ff9qJw0LhXcK3aZ5e8Wm1DqGQAAAJgAbCdeAGwn\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJ1c2VyLTQ4MTUiLCJyb2xlIjoiYWRtaW4iLCJpYXQiOjE3MTAwMDAwMDB9."
    "Qm3xT9vK2pLw8sZr4YbN7cJd1uHf6EaGiO0kVtXqWy5"
)

CORPUS: tuple[Secret, ...] = (
    # --- cloud keys ---
    Secret(
        "aws_access_key_id",
        "AKIAQ3EGRTZ5XMPLJ7VA",
        "Our CI uses the access key id AKIAQ3EGRTZ5XMPLJ7VA for the deploy bucket.",
    ),
    Secret(
        "aws_secret_export",
        "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",
        "Run export AWS_SECRET_ACCESS_KEY=PtYgjmUhBel31iEl2hpChYgCfrL1spNxnyVmihA+ before "
        "the nightly sync.",
    ),
    Secret(
        "aws_secret_ini",
        "2O76UMFxFkM+R5Kjp1vRt/1fjORS+6ilI8ihN5KX",
        "My ~/.aws/credentials has aws_secret_access_key = "
        "2O76UMFxFkM+R5Kjp1vRt/1fjORS+6ilI8ihN5KX under [default].",
    ),
    Secret(
        "aws_secret_prose",
        "Sc7Tvo+hBKqFYY+kv5ZJr3J1TWDtkwtDDb/xHKas",
        "The AWS secret access key for staging is Sc7Tvo+hBKqFYY+kv5ZJr3J1TWDtkwtDDb/xHKas, "
        "keep it handy for tomorrow.",
    ),
    Secret(
        "azure_account_key",
        "T8em/UyRShbbRwh1Kw8VRLg1wOcZCX36hwHpIy8h8oEmh3hpduv8wyf1kxdlJ0upgptEBvYf+Ikyb/qUku3u7g==",
        "The storage connection string is DefaultEndpointsProtocol=https;AccountName=photos;"
        "AccountKey=T8em/UyRShbbRwh1Kw8VRLg1wOcZCX36hwHpIy8h8oEmh3hpduv8wyf1kxdlJ0upgptEBvYf"
        "+Ikyb/qUku3u7g==;EndpointSuffix=core.windows.net",
    ),
    Secret(
        "google_api_key",
        "AIza_uCu3ZR1zTOlUcR64cXQLioDnkHIfxIq2HZ",
        "The maps widget needs the key AIza_uCu3ZR1zTOlUcR64cXQLioDnkHIfxIq2HZ in the config.",
    ),
    Secret(
        "google_oauth_secret",
        "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",
        "Google gave us the OAuth client secret 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 for login.",
    ),
    Secret(
        "digitalocean_token",
        "dop_v1_da6bd0c621de49f145fda9988c79fc35526f7eaed46725a2a7b860dcd6c8a1f8",
        "Use dop_v1_da6bd0c621de49f145fda9988c79fc35526f7eaed46725a2a7b860dcd6c8a1f8 to "
        "resize the droplet.",
    ),
    # --- personal access tokens ---
    Secret(
        "github_pat_classic",
        "ghp_AIxNKu8iS2G8NPRVdD53X83RZJzzzzgEOzdm",
        "Here is my GitHub token ghp_AIxNKu8iS2G8NPRVdD53X83RZJzzzzgEOzdm, push the fix for me.",
    ),
    Secret(
        "github_pat_fine_grained",
        "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",
        "The release bot authenticates with github_pat_enCkhvMdgaKjIg8xNbe3nN_yjOq9wMxEhh2FDEEtfjg"
        "VvVqE1SkHbn88HxjSI6bWHtP3fS2qHx6kwXoIIX since March.",
    ),
    Secret(
        "gitlab_pat",
        "glpat-GvOoNZYW2mZp0zVZomHF",
        "For the mirror I created glpat-GvOoNZYW2mZp0zVZomHF with read access only.",
    ),
    Secret(
        "npm_token",
        "npm_pc94tnwlavyfErGPmpGXafq0fjzLczbttOof",
        "Publishing works again after I put npm_pc94tnwlavyfErGPmpGXafq0fjzLczbttOof in .npmrc.",
    ),
    Secret(
        "pypi_token",
        "pypi-AgEIcHlwaS5vcmcUqBlIFXZ53Ncqe28_ajY75FnCttn6kfaqDeMqG3omjMyXHCabM6JOF8EFd0N",
        "Twine asked for a password so I pasted "
        "pypi-AgEIcHlwaS5vcmcUqBlIFXZ53Ncqe28_ajY75FnCttn6kfaqDeMqG3omjMyXHCabM6JOF8EFd0N there.",
    ),
    Secret(
        "huggingface_token",
        "hf_jI6GKFSufrdZSlB5er8bOfZqfM2oeq3hDa",
        "Download the weights with hf_jI6GKFSufrdZSlB5er8bOfZqfM2oeq3hDa as the token.",
    ),
    # --- Slack, Stripe, OpenAI and other service tokens ---
    Secret(
        "slack_bot_token",
        "xoxb-18341704718-7463319128452-M0OGr4hTxoF54Fzbka8FRCzt",
        "The standup bot posts with xoxb-18341704718-7463319128452-M0OGr4hTxoF54Fzbka8FRCzt.",
    ),
    Secret(
        "slack_webhook",
        "https://hooks.slack.com/services/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",
        "Alerts go to https://hooks.slack.com/services/T0J0WYUHVA/B0UVZHMASQX/"
        "ezy3Lex7BWr2drgd1QsO7jpr so the team sees them.",
    ),
    Secret(
        "stripe_live_key",
        "sk_live_wUbbYrEqmSM9wCZ7Uw9xfogo",
        "Switch checkout to sk_live_wUbbYrEqmSM9wCZ7Uw9xfogo on Monday morning.",
    ),
    Secret(
        "openai_key",
        "sk-proj-8zRA9a9SkpXz9w3QlY7Zkuvqdt7s8Stqcbnr3yBdGBLEPH1q",
        "My OpenAI key is sk-proj-8zRA9a9SkpXz9w3QlY7Zkuvqdt7s8Stqcbnr3yBdGBLEPH1q, use it for "
        "the experiments.",
    ),
    Secret(
        "anthropic_key",
        "sk-ant-api03-hT61qtc4xatws8phP9nhFyJfm5di4PzJ59FHz5r1pY4OjE2jBMptUsGr7CmYAA",
        "The summarizer calls Claude with "
        "sk-ant-api03-hT61qtc4xatws8phP9nhFyJfm5di4PzJ59FHz5r1pY4OjE2jBMptUsGr7CmYAA.",
    ),
    Secret(
        "sendgrid_key",
        "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",
        "Newsletters go out through SendGrid, key "
        "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.",
    ),
    Secret(
        "mailgun_key",
        "key-7893f57fd14c1604d115cea325a65e19",
        "Receipts are sent with the Mailgun key key-7893f57fd14c1604d115cea325a65e19 today.",
    ),
    Secret(
        "telegram_bot_token",
        "6557210141:AAS1pAWTN3lg8zV5yPU8d0FZfWe7ihGyiRU",
        "The plant-watering bot runs on 6557210141:AAS1pAWTN3lg8zV5yPU8d0FZfWe7ihGyiRU now.",
    ),
    Secret(
        "signing_secret_env",
        "e574de739988b886e7577496a2c8773e",
        "Put SLACK_SIGNING_SECRET=e574de739988b886e7577496a2c8773e in the .env file.",
    ),
    # --- JWTs, bearer tokens, private keys ---
    Secret("jwt", _JWT, f"The session cookie was {_JWT} when it failed."),
    Secret(
        "bearer_token",
        "rv99NcqVTSu7rtaUWM6ZO88eb0ogET9D",
        "curl it with the header Authorization: Bearer rv99NcqVTSu7rtaUWM6ZO88eb0ogET9D please.",
    ),
    Secret("pem_rsa_key", _PEM_RSA, f"This is the deploy key, keep it safe:\n{_PEM_RSA}\nthanks"),
    Secret("openssh_key", _OPENSSH, f"My laptop's id_ed25519 is\n{_OPENSSH}"),
    # --- database URLs with passwords ---
    Secret(
        "postgres_url",
        "Zq7!wPx2mR",
        "The app connects to postgresql://app:Zq7!wPx2mR@db.internal:5432/prod at startup.",
    ),
    Secret(
        "mysql_url",
        "S3cr3tRoot99",
        "Backups read from mysql://root:S3cr3tRoot99@10.0.0.5/shop every night.",
    ),
    Secret(
        "redis_url_empty_user",
        "r3disP4ss-2024",
        "Sessions live in redis://:r3disP4ss-2024@cache.local:6379/0 for now.",
    ),
    Secret(
        "mongodb_url",
        "M0ng0Pass88",
        "Analytics uses mongodb+srv://admin:M0ng0Pass88@cluster0.example.net/app as its store.",
    ),
    Secret(
        "https_basic_url",
        "Tr0ub4dor3x",
        "The webhook target is https://deploy:Tr0ub4dor3x@ci.example.org/hooks for releases.",
    ),
    # --- passwords in sentences ---
    Secret(
        "password_is_colon",
        "Tangerine!Falcon7",
        "The password is: Tangerine!Falcon7 and the user is admin.",
    ),
    Secret(
        "wifi_password_bare",
        "Sunflower42Blue",
        "At the cabin the wifi password Sunflower42Blue works on both networks.",
    ),
    Secret(
        "db_password_assignment",
        "Kx9#vLm2qT",
        "In settings.py I have db_password='Kx9#vLm2qT' for the local database.",
    ),
    Secret(
        "router_pwd",
        "rt-Admin-5521",
        "Remember my pwd for the router: rt-Admin-5521 in case it resets.",
    ),
    Secret(
        "password_json",
        "Qu4rtz-Lynx-09",
        'The config file says {"username": "ops", "password": "Qu4rtz-Lynx-09"} for the VPN.',
    ),
    Secret(
        "passphrase_quoted",
        "correct horse battery staple",
        "The Wi-Fi passphrase is 'correct horse battery staple' at grandma's place.",
    ),
    Secret(
        "password_spanish",
        "Girasol2024",
        "Mi contraseña es Girasol2024 y no la compartas con nadie.",
    ),
    Secret(
        "password_german",
        "Sonnenblume77",
        "Mein Passwort ist Sonnenblume77 für das Konto bei der Sparkasse.",
    ),
    Secret(
        "password_french",
        "Tournesol#88",
        "Mon mot de passe est Tournesol#88 pour la banque en ligne.",
    ),
    Secret(
        "password_italian",
        "Girasole55x",
        "La mia password è Girasole55x, non dirla a nessuno.",
    ),
    Secret(
        "password_portuguese",
        "Girassol2023z",
        "Minha senha é Girassol2023z no aplicativo do banco.",
    ),
    Secret(
        "password_dutch",
        "Zonnebloem31",
        "Mijn wachtwoord is Zonnebloem31 voor de mail van het werk.",
    ),
    # --- cards, PINs, one-time-password seeds, wallets ---
    Secret(
        "visa_spaces",
        "4539 1488 0343 6467",
        "Book the flights on my Visa 4539 1488 0343 6467, it expires 09/28.",
    ),
    Secret(
        "mastercard_dashes",
        "5425-2334-3010-9903",
        "The company Mastercard is 5425-2334-3010-9903 for hotel bookings.",
    ),
    Secret(
        "amex_grouped",
        "3782 822463 10005",
        "Charge the conference fee to the Amex 3782 822463 10005 please.",
    ),
    Secret(
        "card_solid",
        "6011000990139424",
        "My old Discover card number was 6011000990139424 before they replaced it.",
    ),
    Secret("bank_pin", "8316", "My bank card PIN is 8316, don't let me forget it."),
    Secret(
        "totp_uri",
        "YWANZ7CD7ZOQJG2N",
        "Scan otpauth://totp/Acme:alice@example.com?secret=YWANZ7CD7ZOQJG2N&issuer=Acme "
        "into the new phone.",
    ),
    Secret(
        "totp_seed",
        "PCT2H25ZFBS4QUL62AQRD5VG",
        "If I lose my phone the 2FA seed: PCT2H25ZFBS4QUL62AQRD5VG restores the authenticator.",
    ),
    Secret(
        "totp_secret_grouped",
        "klnd kjeh fnvd dv77",
        "The TOTP secret is klnd kjeh fnvd dv77 for the shared admin account.",
    ),
    Secret(
        "seed_phrase",
        "orbit velvet canyon lemon ripple tiger amber frost mango violin hazard pupil",
        "My wallet seed phrase is orbit velvet canyon lemon ripple tiger amber frost mango "
        "violin hazard pupil, write it down.",
    ),
)

assert len({s.name for s in CORPUS}) == len(CORPUS)

#: Ordinary conversation that the screen must leave exactly as it is.
ORDINARY: tuple[str, ...] = (
    "I forgot my password yesterday and had to reset it.",
    "The password is wrong, I'll ask IT tomorrow.",
    "My password is too short for the new rules.",
    "Use a password manager, it is much safer.",
    "The wifi password changed last week.",
    "Prefers tokens of appreciation over gifts",
    "The bearer of good news arrived at 9:30.",
    "My sister's birthday is on 3 May 2023.",
    "Uses https://example.com/docs for reference",
    "Call me at +1 415 555 0132 or 020 7946 0958 after six.",
    "My order number is 112-4459021-7736402 and it ships on 2024-03-15.",
    "Tracking number 1Z999AA10123456784 says it is in Leipzig.",
    "The flight costs $1,249.99 and the hotel 89.50 EUR per night.",
    "We moved in 1998, then again in 2004 and 2017.",
    "The invoice total was 4111 dollars for 1111 widgets.",
    "Our IBAN-free transfer id is 20240315-000123.",
    "The secret to good bread is patience.",
    "The key is to practice every day for 20 minutes.",
    "Mi contraseña es muy larga, no la recuerdo.",
    "Mein Passwort ist nicht mehr gültig.",
    "I pinned the photo from 12/05/2023 to the board.",
    "Commit 3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345 fixed the bug.",
    "Page 4532 of the manual explains the 16 settings.",
    "The ISBN is 978-3-16-148410-0 and it costs 24.90.",
    "My PIN code reminder app is great.",
    "He set the timer for 1500 seconds, that is 25 minutes.",
    "Authorization: approved by the manager on Friday.",
    "The course covers Basic internationalization and localisation.",
    "def login(user: str, password: str) -> bool:",
    "self.token = token # set in __init__",
    "password = getpass.getpass()",
    "password = os.environ['DB_PASSWORD']",
    "Set GITHUB_TOKEN=$GH_TOKEN in the workflow.",
    "The 2FA secret is that authenticator apps are safer than text messages.",
    "A seed phrase is twelve random words that restore your wallet, keep them offline please.",
    "The access key is under the doormat, the spare is with Anna.",
    "My credentials are stored in the company vault.",
    "Visit https://example.com:8443/status for the dashboard.",
)
