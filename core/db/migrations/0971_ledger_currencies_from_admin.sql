-- One source of minor units (issue 21 item 2): administration's currency table is the list of
-- currencies the ledger accepts (core/ledger/currency.ts keeps a snapshot of it). Seeded with
-- the 37 currencies and minor units the ledger hard-coded until now. A row an administrator
-- already stored keeps its values, except the minor units of a currency some ledger account
-- holds: money was booked in the ledger's units, and those cannot change under it.
INSERT INTO admin_currencies (code, name, minor_units) VALUES
  ('KES', 'Kenyan Shilling', 2),
  ('UGX', 'Uganda Shilling', 0),
  ('TZS', 'Tanzanian Shilling', 2),
  ('RWF', 'Rwanda Franc', 0),
  ('BIF', 'Burundi Franc', 0),
  ('ETB', 'Ethiopian Birr', 2),
  ('SOS', 'Somali Shilling', 2),
  ('SSP', 'South Sudanese Pound', 2),
  ('CDF', 'Congolese Franc', 2),
  ('ZMW', 'Zambian Kwacha', 2),
  ('MWK', 'Malawi Kwacha', 2),
  ('MZN', 'Mozambique Metical', 2),
  ('ZAR', 'Rand', 2),
  ('BWP', 'Pula', 2),
  ('NAD', 'Namibia Dollar', 2),
  ('NGN', 'Naira', 2),
  ('GHS', 'Ghana Cedi', 2),
  ('XOF', 'CFA Franc BCEAO', 0),
  ('XAF', 'CFA Franc BEAC', 0),
  ('EGP', 'Egyptian Pound', 2),
  ('MAD', 'Moroccan Dirham', 2),
  ('TND', 'Tunisian Dinar', 3),
  ('USD', 'US Dollar', 2),
  ('EUR', 'Euro', 2),
  ('GBP', 'Pound Sterling', 2),
  ('CHF', 'Swiss Franc', 2),
  ('JPY', 'Yen', 0),
  ('CNY', 'Yuan Renminbi', 2),
  ('INR', 'Indian Rupee', 2),
  ('AED', 'UAE Dirham', 2),
  ('SAR', 'Saudi Riyal', 2),
  ('BHD', 'Bahraini Dinar', 3),
  ('KWD', 'Kuwaiti Dinar', 3),
  ('OMR', 'Rial Omani', 3),
  ('JOD', 'Jordanian Dinar', 3),
  ('CAD', 'Canadian Dollar', 2),
  ('AUD', 'Australian Dollar', 2)
ON CONFLICT (code) DO UPDATE SET minor_units = EXCLUDED.minor_units, version = admin_currencies.version + 1, updated_at = now()
  WHERE admin_currencies.minor_units <> EXCLUDED.minor_units
    AND EXISTS (SELECT 1 FROM ledger_accounts a WHERE a.currency = EXCLUDED.code);
