-- Console auth tokens (Nova's console_auth_tokens): minted by the API
-- process that answers a remote-console request, checked by the console
-- proxy of whichever API process the client reaches. A token is held only
-- as its SHA-256 (hex); `address` and `port` are where the console
-- listens on the compute host; `expires` is in Unix seconds. Expired rows
-- are removed when tokens are minted; a deleted server's go with it.
CREATE TABLE console_auth_tokens (
    token_hash     VARCHAR(64) PRIMARY KEY,
    console_type   VARCHAR(16) NOT NULL,
    instance_uuid  VARCHAR(36) NOT NULL,
    host           VARCHAR(255) NOT NULL,
    address        VARCHAR(64) NOT NULL,
    port           INTEGER NOT NULL,
    expires        BIGINT NOT NULL
);
CREATE INDEX console_auth_tokens_expires_idx ON console_auth_tokens (expires);
CREATE INDEX console_auth_tokens_instance_idx ON console_auth_tokens (instance_uuid);
