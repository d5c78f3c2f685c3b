-- Price sets were written as a JSON string inside jsonb (the text of the object, encoded a
-- second time), so prices->'model' was NULL. Rows written that way become the object they
-- spell; from now on a price set must be an object.
UPDATE price_sets SET prices = (prices #>> '{}')::jsonb WHERE jsonb_typeof(prices) = 'string';
ALTER TABLE price_sets ADD CONSTRAINT price_sets_prices_object
    CHECK (jsonb_typeof(prices) = 'object');
