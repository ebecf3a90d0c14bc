package upstreamsim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"

	"streamgate/catalog"
)

// The networks of the service.
const (
	Mainnet = "mainnet"
	Testnet = "testnet"
)

// Market hours schedules (UTC; daylight saving time and holidays are
// ignored). See schedule.
const (
	hours247       = "24/7"
	hoursNYSE      = "US Equities Regular"
	hoursNYSEExt   = "US Equities Extended"
	hoursNYSENight = "US Equities Overnight"
	hoursForex     = "Forex 24/5"
	hoursNAV       = "NAV Daily"
	hoursMacro     = "Macro Releases"
	hoursCME       = "Metals and Commodities 23/5"
)

// kind says how a stream's value moves with time.
type kind uint8

const (
	kindPrice kind = iota // sinusoids with hashed phases plus per-second noise
	kindRate              // redemption rate: grows daily by a fixed yearly rate
	kindNAV               // net asset value: daily steps, slight growth
	kindMacro             // economic figure: one value per calendar month
)

// def is one line of the stream table. main and test give the presence and
// state on each network: "" absent, "L" live, "T" testing, "HL"/"HT" hidden.
type def struct {
	base, quote, asset     string
	class, feedType, attr  string
	schema                 Schema
	level                  float64
	main, test             string
	expected, decommission string // YYYY-MM-DD of a scheduled or done decommission
	suffix                 string // name suffix; derived from attr when empty
}

// Classes, feed types and attribute types used below.
const (
	cCrypto    = "Crypto"
	cEquities  = "Equities"
	cForex     = "Forex"
	cMacro     = "Macroeconomics"
	cNAV       = "NAV"
	cTAsset    = "Tokenized Asset"
	cTCLO      = "Tokenized CLO"
	cTDebt     = "Tokenized Debt"
	cTTreas    = "Tokenized Treasuries"
	cCommodity = "Commodities"
	cFutures   = "Futures"
	cRates     = "Interest Rates"

	ftCrypto   = "Crypto"
	ftDEX      = "Crypto-DEX"
	ftDatalink = "Datalink"
	ftEquities = "Equities"
	ftForex    = "Forex"
	ftMacro    = "Macroeconomics"
	ftNAV      = "Net Asset Value"
	ftSmart    = "SmartData"
	ftTAsset   = "Tokenized Asset"
	ftRWA      = "RWA"
	ftFutures  = "Futures"
	ftRates    = "Interest Rate"

	aCex       = "CexPrice"
	aDex       = "DexPrice"
	aEquity    = "EquityPrice"
	aRate      = "ExchangeRate"
	aExtended  = "ExtendedHoursEquityPrice"
	aForex     = "ForexPrice"
	aNAV       = "NAV"
	aOvernight = "OvernightHoursEquityPrice"
	aRegular   = "RegularHoursEquityPrice"
	aSmart     = "SmartData"
	aTop       = "TopOfBook"
	aLegacy    = "LegacyPrice"
	aBasic     = "BasicPrice"
	aMulti     = "MultiPrice"
	aRWA       = "RWAPrice"
	aInterest  = "InterestRate"
	aTEquity   = "TokenizedEquityPrice"
	aFutures   = "FuturesPrice"
)

var table = []def{
	// Centralised-exchange crypto prices.
	{base: "BTC", quote: "USD", asset: "Bitcoin", level: 60000, main: "L", test: "L"},
	{base: "ETH", quote: "USD", asset: "Ethereum", level: 3000, main: "L", test: "L"},
	{base: "LINK", quote: "USD", asset: "Chainlink", level: 15, main: "L", test: "L"},
	{base: "SOL", quote: "USD", asset: "Solana", level: 150, main: "L", test: "L"},
	{base: "AVAX", quote: "USD", asset: "Avalanche", level: 30, main: "L", test: "L"},
	{base: "ARB", quote: "USD", asset: "Arbitrum", level: 0.8, main: "L", test: "L"},
	{base: "OP", quote: "USD", asset: "Optimism", level: 1.8, main: "L", test: "L"},
	{base: "MATIC", quote: "USD", asset: "Polygon", level: 0.6, main: "L", test: "L", expected: "2024-09-30", decommission: "2024-09-30"},
	{base: "DOGE", quote: "USD", asset: "Dogecoin", level: 0.15, main: "L", test: "L"},
	{base: "XRP", quote: "USD", asset: "XRP", level: 0.55, main: "L", test: "L"},
	{base: "ADA", quote: "USD", asset: "Cardano", level: 0.45, main: "L", test: "L"},
	{base: "DOT", quote: "USD", asset: "Polkadot", level: 6, main: "L", test: "L"},
	{base: "LTC", quote: "USD", asset: "Litecoin", level: 80, main: "L", test: "L"},
	{base: "BNB", quote: "USD", asset: "BNB", level: 580, main: "L", test: "L"},
	{base: "UNI", quote: "USD", asset: "Uniswap", level: 8, main: "L", test: "L"},
	{base: "AAVE", quote: "USD", asset: "Aave", level: 120, main: "L", test: "L"},
	{base: "USDC", quote: "USD", asset: "USD Coin", level: 1, main: "L", test: "L"},
	{base: "USDT", quote: "USD", asset: "Tether USD", level: 1, main: "L", test: "L"},
	{base: "DAI", quote: "USD", asset: "Dai", level: 1, main: "L", test: "T"},
	{base: "ETH", quote: "BTC", asset: "Ethereum", level: 0.05, main: "L"},
	{base: "SHIB", quote: "USD", asset: "Shiba Inu", level: 0.00002, main: "L", test: "L", expected: "2027-06-30"},
	{base: "PEPE", quote: "USD", asset: "Pepe", level: 0.000009, test: "T"},
	{base: "SUI", quote: "USD", asset: "Sui", level: 1.2, main: "L", test: "T"},
	{base: "APT", quote: "USD", asset: "Aptos", level: 8, main: "L", test: "L"},
	{base: "TIA", quote: "USD", asset: "Celestia", level: 6, main: "L", test: "T"},
	{base: "WIF", quote: "USD", asset: "dogwifhat", level: 2, test: "T"},
	{base: "BONK", quote: "USD", asset: "Bonk", level: 0.00002, main: "T", test: "T"},
	{base: "HYPE", quote: "USD", asset: "Hyperliquid", level: 25, main: "HL", test: "T"},
	{base: "FTM", quote: "USD", asset: "Fantom", level: 0.7, main: "L", test: "L", expected: "2025-01-15", decommission: "2025-01-15"},
	{base: "MKR", quote: "USD", asset: "Maker", level: 2000, main: "L", test: "L", expected: "2028-03-31"},
	{base: "TON", quote: "USD", asset: "Toncoin", level: 5.5, main: "L", test: "T"},
	// Onchain (DEX) prices.
	{base: "CBBTC", quote: "USD", asset: "Coinbase Wrapped BTC", feedType: ftDEX, attr: aDex, level: 60000, main: "L", test: "L"},
	{base: "AERO", quote: "USD", asset: "Aerodrome", feedType: ftDEX, attr: aDex, level: 1.1, main: "L", test: "T"},
	{base: "VIRTUAL", quote: "USD", asset: "Virtuals Protocol", feedType: ftDEX, attr: aDex, level: 1.5, main: "T", test: "T"},
	{base: "BRETT", quote: "USD", asset: "Brett", feedType: ftDEX, attr: aDex, level: 0.1, test: "T"},
	{base: "DEGEN", quote: "USD", asset: "Degen", feedType: ftDEX, attr: aDex, level: 0.01, main: "HT", test: "T"},
	// Top of book.
	{base: "BTC", quote: "USD", asset: "Bitcoin", attr: aTop, level: 60000, main: "L", test: "L"},
	{base: "ETH", quote: "USD", asset: "Ethereum", attr: aTop, level: 3000, main: "L", test: "T"},
	// Redemption rates of staked assets.
	{base: "WSTETH", quote: "STETH", asset: "Wrapped stETH", attr: aRate, schema: SchemaV7, level: 1.18, main: "L", test: "L"},
	{base: "RETH", quote: "ETH", asset: "Rocket Pool ETH", attr: aRate, schema: SchemaV7, level: 1.11, main: "L", test: "L"},
	{base: "CBETH", quote: "ETH", asset: "Coinbase Wrapped Staked ETH", attr: aRate, schema: SchemaV7, level: 1.08, main: "L", test: "T"},
	{base: "WEETH", quote: "EETH", asset: "Wrapped eETH", attr: aRate, schema: SchemaV7, level: 1.05, main: "L", test: "L"},
	{base: "SFRXETH", quote: "FRXETH", asset: "Staked Frax Ether", attr: aRate, schema: SchemaV7, level: 1.09, test: "HT"},
	{base: "EZETH", quote: "ETH", asset: "Renzo Restaked ETH", attr: aRate, schema: SchemaV7, level: 1.02, main: "HL", test: "HT"},
	// Equities.
	{base: "AAPL", quote: "USD", asset: "Apple Inc.", class: cEquities, attr: aEquity, level: 220, main: "L", test: "L"},
	{base: "TSLA", quote: "USD", asset: "Tesla, Inc.", class: cEquities, attr: aEquity, level: 250, main: "L", test: "L"},
	{base: "NVDA", quote: "USD", asset: "NVIDIA Corporation", class: cEquities, attr: aEquity, level: 120, main: "L", test: "L"},
	{base: "MSFT", quote: "USD", asset: "Microsoft Corporation", class: cEquities, attr: aEquity, level: 420, main: "L", test: "T"},
	{base: "AMZN", quote: "USD", asset: "Amazon.com, Inc.", class: cEquities, attr: aEquity, level: 185, main: "L", test: "T"},
	{base: "GOOGL", quote: "USD", asset: "Alphabet Inc.", class: cEquities, attr: aEquity, level: 170, main: "L"},
	{base: "GME", quote: "USD", asset: "GameStop Corp.", class: cEquities, attr: aEquity, level: 25, main: "L", test: "L", expected: "2027-12-31"},
	{base: "META", quote: "USD", asset: "Meta Platforms, Inc.", class: cEquities, attr: aRegular, level: 500, main: "L", test: "T"},
	{base: "SPY", quote: "USD", asset: "SPDR S&P 500 ETF Trust", class: cEquities, attr: aRegular, level: 550, main: "L", test: "L"},
	{base: "COIN", quote: "USD", asset: "Coinbase Global, Inc.", class: cEquities, attr: aRegular, level: 230, main: "L", test: "L"},
	{base: "IBM", quote: "USD", asset: "International Business Machines", class: cEquities, attr: aRegular, level: 190, main: "HL"},
	{base: "QQQ", quote: "USD", asset: "Invesco QQQ Trust", class: cEquities, attr: aExtended, level: 480, main: "L", test: "L"},
	{base: "AAPL", quote: "USD", asset: "Apple Inc.", class: cEquities, attr: aExtended, level: 220, main: "L", test: "T"},
	{base: "MSTR", quote: "USD", asset: "MicroStrategy Inc.", class: cEquities, attr: aExtended, level: 350, test: "T"},
	{base: "TSLA", quote: "USD", asset: "Tesla, Inc.", class: cEquities, attr: aOvernight, level: 250, main: "L", test: "T"},
	{base: "NVDA", quote: "USD", asset: "NVIDIA Corporation", class: cEquities, attr: aOvernight, level: 120, main: "T", test: "T"},
	// Foreign exchange.
	{base: "EUR", quote: "USD", asset: "Euro", class: cForex, attr: aForex, level: 1.08, main: "L", test: "L"},
	{base: "GBP", quote: "USD", asset: "British Pound", class: cForex, attr: aForex, level: 1.27, main: "L", test: "L"},
	{base: "USD", quote: "JPY", asset: "US Dollar", class: cForex, attr: aForex, level: 150, main: "L", test: "L"},
	{base: "AUD", quote: "USD", asset: "Australian Dollar", class: cForex, attr: aForex, level: 0.66, main: "L", test: "T"},
	{base: "USD", quote: "CAD", asset: "US Dollar", class: cForex, attr: aForex, level: 1.36, main: "L", test: "T"},
	{base: "USD", quote: "CHF", asset: "US Dollar", class: cForex, attr: aForex, level: 0.88, main: "L"},
	{base: "NZD", quote: "USD", asset: "New Zealand Dollar", class: cForex, attr: aForex, level: 0.6, test: "T"},
	{base: "USD", quote: "CNH", asset: "US Dollar", class: cForex, attr: aForex, level: 7.2, main: "T", test: "T"},
	{base: "XAU", quote: "USD", asset: "Gold", class: cForex, attr: aForex, level: 2300, main: "L", test: "L"},
	// Macroeconomic figures.
	{base: "USCPI", quote: "INDEX", asset: "US Consumer Price Index", class: cMacro, attr: aSmart, level: 314, main: "L", test: "L", suffix: "Macro-Datalink-001"},
	{base: "USGDP", quote: "PCT", asset: "US Real GDP Growth, annualised", class: cMacro, attr: aSmart, level: 2, main: "L", test: "T", suffix: "Macro-Datalink-001"},
	{base: "USUNRATE", quote: "PCT", asset: "US Unemployment Rate", class: cMacro, attr: aSmart, level: 4.1, main: "L", test: "T", suffix: "Macro-Datalink-001"},
	{base: "FEDFUNDS", quote: "PCT", asset: "Effective Federal Funds Rate", class: cMacro, attr: aSmart, level: 5.33, test: "T", suffix: "Macro-Datalink-001"},
	// Datalink crypto metrics.
	{base: "ETHSTAKING", quote: "APR", asset: "Ethereum Staking APR", feedType: ftDatalink, attr: aSmart, schema: SchemaV7, level: 3.2, main: "L", test: "L", suffix: "Datalink-001"},
	{base: "BTCHASHRATE", quote: "EHS", asset: "Bitcoin Network Hashrate", feedType: ftDatalink, attr: aSmart, schema: SchemaV7, level: 650, main: "L", test: "T", suffix: "Datalink-001"},
	// Fund net asset values and tokenized real-world assets.
	{base: "WTGXX", quote: "USD", asset: "WisdomTree Government Money Market Digital Fund", class: cNAV, level: 1, main: "L", test: "L"},
	{base: "FOBXX", quote: "USD", asset: "Franklin OnChain U.S. Government Money Fund", class: cNAV, level: 1, main: "L", test: "T"},
	{base: "BUIDL", quote: "USD", asset: "BlackRock USD Institutional Digital Liquidity Fund", class: cTTreas, level: 1, main: "L", test: "L"},
	{base: "USTB", quote: "USD", asset: "Superstate Short Duration US Government Securities Fund", class: cTTreas, level: 10.4, main: "L", test: "L"},
	{base: "OUSG", quote: "USD", asset: "Ondo Short-Term US Government Bond Fund", class: cTTreas, level: 108, main: "L", test: "T"},
	{base: "USYC", quote: "USD", asset: "Hashnote US Yield Coin", class: cTTreas, level: 1.08, main: "HL", test: "T"},
	{base: "JAAA", quote: "USD", asset: "Janus Henderson Anemoy AAA CLO Fund", class: cTCLO, level: 1.02, main: "L", test: "L"},
	{base: "JTRSY", quote: "USD", asset: "Janus Henderson Anemoy Treasury Fund", class: cTTreas, level: 1.0, test: "T"},
	{base: "ACRED", quote: "USD", asset: "Apollo Diversified Credit Securitize Fund", class: cTDebt, feedType: ftSmart, attr: aSmart, level: 1.05, main: "L", test: "T"},
	{base: "TBTC", quote: "BTC", asset: "tBTC Proof of Reserve", class: cTAsset, feedType: ftSmart, attr: aSmart, level: 5000, main: "L", test: "T", suffix: "PoR-SmartData-001"},
	{base: "PAXG", quote: "USD", asset: "PAX Gold", class: cTAsset, feedType: ftTAsset, attr: aCex, level: 2300, main: "L", test: "L"},
	{base: "XAUT", quote: "USD", asset: "Tether Gold", class: cTAsset, feedType: ftTAsset, attr: aCex, level: 2300, main: "L", test: "T"},
	{base: "SPYX", quote: "USD", asset: "Tokenized S&P 500 ETF", class: cTAsset, feedType: ftTAsset, attr: aTop, schema: SchemaV11, level: 550, main: "T", test: "T"},
	// One or more streams of every other schema the SDKs decode (and V14).
	{base: "ETH", quote: "USD", asset: "Ethereum", attr: aLegacy, schema: SchemaV1, level: 3000, main: "L", test: "L"},
	{base: "BTC", quote: "USD", asset: "Bitcoin", attr: aBasic, schema: SchemaV2, level: 60000, main: "L", test: "L"},
	{base: "XPT", quote: "USD", asset: "Platinum", class: cCommodity, attr: aRWA, schema: SchemaV4, level: 950, main: "L", test: "L"},
	{base: "SOFR", quote: "PCT", asset: "Secured Overnight Financing Rate", class: cRates, attr: aInterest, schema: SchemaV5, level: 4.33, main: "L", test: "L"},
	{base: "ETH", quote: "USD", asset: "Ethereum", attr: aMulti, schema: SchemaV6, level: 3000, main: "L", test: "T"},
	{base: "XAG", quote: "USD", asset: "Silver", class: cCommodity, attr: aRWA, schema: SchemaV8, level: 29, main: "L", test: "L"},
	{base: "WTI", quote: "USD", asset: "WTI Crude Oil Synthetic Spot", class: cCommodity, attr: aRWA, schema: SchemaV8, level: 75, main: "L", test: "T"},
	{base: "BENJI", quote: "USD", asset: "Franklin OnChain U.S. Government Money Fund (BENJI)", class: cNAV, attr: aNAV, schema: SchemaV9, level: 1, main: "L", test: "L", suffix: "NAV-SmartData-001"},
	{base: "AAPLX", quote: "USD", asset: "Apple xStock (tokenized Apple Inc.)", class: cTAsset, feedType: ftTAsset, attr: aTEquity, schema: SchemaV10, level: 220, main: "L", test: "L"},
	{base: "USCC", quote: "USD", asset: "Superstate Crypto Carry Fund", class: cNAV, attr: aNAV, schema: SchemaV12, level: 10.6, main: "L", test: "T", suffix: "NAV-SmartData-002"},
	{base: "SOL", quote: "USD", asset: "Solana", attr: aTop, schema: SchemaV13, level: 150, main: "L", test: "L", suffix: "TopOfBook-DS-Advanced-001"},
	{base: "CL", quote: "USD", asset: "WTI Crude Oil Futures, front month", class: cFutures, attr: aFutures, schema: SchemaV14, level: 75, main: "L", test: "T"},
}

// fill completes a def with the defaults of its class.
func (d def) fill() def {
	if d.class == "" {
		d.class = cCrypto
	}
	if d.attr == "" {
		d.attr = aCex
	}
	if d.feedType == "" {
		switch d.class {
		case cCrypto:
			d.feedType = ftCrypto
		case cEquities:
			d.feedType = ftEquities
		case cForex:
			d.feedType = ftForex
		case cMacro:
			d.feedType = ftMacro
		case cCommodity:
			d.feedType = ftRWA
		case cFutures:
			d.feedType = ftFutures
		case cRates:
			d.feedType = ftRates
		default:
			d.feedType = ftNAV
		}
	}
	if d.attr == aCex && d.class != cCrypto && d.class != cTAsset {
		d.attr = aNAV
	}
	if d.schema == 0 {
		switch {
		case d.class == cEquities || d.class == cForex:
			d.schema = SchemaV11
		case d.attr == aCex || d.attr == aDex || d.attr == aTop:
			d.schema = SchemaV3
		default:
			d.schema = SchemaV7
		}
	}
	if d.suffix == "" {
		d.suffix = map[string]string{
			aCex:       "RefPrice-DS-Premium-Global-003",
			aDex:       "RefPrice-DEX-DS-Premium-Global-001",
			aTop:       "TopOfBook-DS-Premium-Global-001",
			aRate:      "Exchange-Rate-DS-001",
			aEquity:    "RefPrice-Equity-DS-001",
			aRegular:   "RegularHours-Equity-DS-001",
			aExtended:  "ExtendedHours-Equity-DS-001",
			aOvernight: "OvernightHours-Equity-DS-001",
			aForex:     "RefPrice-FX-DS-001",
			aNAV:       "NAV-Datalink-001",
			aSmart:     "SmartData-Datalink-001",
			aLegacy:    "RefPrice-DS-Legacy-001",
			aBasic:     "RefPrice-DS-Basic-Global-001",
			aMulti:     "MultiPrice-DS-001",
			aRWA:       "RefPrice-RWA-DS-001",
			aInterest:  "Rate-DS-001",
			aTEquity:   "TokenizedEquity-DS-001",
			aFutures:   "Futures-DS-001",
		}[d.attr]
	}
	return d
}

func (d def) name() string { return d.base + "/" + d.quote + "-" + d.suffix }

func (d def) serviceLevel() string {
	if d.class == cCrypto && d.feedType != ftDatalink {
		return "Streams"
	}
	if d.class == cEquities || d.class == cForex || d.class == cCommodity || d.class == cFutures || d.feedType == ftTAsset {
		return "Streams"
	}
	return "Datalink"
}

func (d def) marketHours() string {
	switch d.attr {
	case aEquity, aExtended:
		return hoursNYSEExt
	case aRegular:
		return hoursNYSE
	case aOvernight:
		return hoursNYSENight
	case aForex:
		return hoursForex
	case aRWA, aFutures:
		return hoursCME
	case aTEquity:
		return hoursNYSE
	}
	switch d.class {
	case cMacro:
		return hoursMacro
	case cNAV, cTTreas, cTCLO, cTDebt:
		return hoursNAV
	}
	return hours247
}

// FeedIDFor returns the stream ID the simulator gives a stream of schema s
// named name: the schema in the first two bytes, then bytes of the SHA-256
// of the name. A stream present on both networks has the same ID on each.
func FeedIDFor(s Schema, name string) [32]byte {
	id := sha256.Sum256([]byte("streamgate-simulator/feed/" + name))
	binary.BigEndian.PutUint16(id[:2], uint16(s))
	return id
}

// hash64 is a stable 64-bit hash of its parts.
func hash64(parts ...string) uint64 {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var sum [32]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// stream is a stream of one network with everything the handlers and the
// value model need, computed once.
type stream struct {
	catalog.Indexed
	idx     int // position in network.streams, part of cache keys
	hidden  bool
	id      [32]byte
	idHex   string // "0x" + 64 lowercase hex digits
	schema  Schema
	created int64 // Unix seconds
	decom   int64 // Unix seconds of decommission; math.MaxInt64 when none
	delay   int64 // publication lag, seconds
	json    []byte
	refJSON []byte // {"feedID":"0x..."}
	model   model
}

var (
	epoch2022   = time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	latestBirth = time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC).Unix()
)

// buildStreams returns the streams of a network, sorted by feed ID.
func buildStreams(network string) []*stream {
	var out []*stream
	for _, raw := range table {
		state := raw.main
		if network == Testnet {
			state = raw.test
		}
		if state == "" {
			continue
		}
		d := raw.fill()
		name := d.name()
		id := FeedIDFor(d.schema, name)
		h := hash64(name)

		var expected, decommissioned *string
		end := latestBirth
		if d.expected != "" {
			t, _ := time.Parse(time.DateOnly, d.expected)
			s := t.UTC().Format(time.RFC3339)
			expected = &s
			end = min(end, t.Unix()-180*86400)
		}
		decom := int64(1<<63 - 1)
		if d.decommission != "" {
			t, _ := time.Parse(time.DateOnly, d.decommission)
			t = t.Add(16 * time.Hour)
			s := t.UTC().Format(time.RFC3339)
			decommissioned = &s
			decom = t.Unix()
		}
		created := epoch2022 + int64(h%uint64(end-epoch2022))
		status := catalog.StatusLive
		if strings.HasSuffix(state, "T") {
			status = catalog.StatusTesting
		}
		s := catalog.Stream{
			FeedID:                 "0x" + hex.EncodeToString(id[:]),
			Name:                   name,
			AssetName:              d.asset,
			BaseAsset:              d.base,
			QuoteAsset:             d.quote,
			AssetClass:             d.class,
			FeedType:               d.feedType,
			AttributeType:          d.attr,
			MarketHours:            d.marketHours(),
			SchemaVersion:          d.schema.String(),
			ServiceLevel:           d.serviceLevel(),
			NetworkType:            network,
			Status:                 status,
			CreatedAt:              time.Unix(created, 0).UTC().Format(time.RFC3339),
			ExpectedDecommissionAt: expected,
			DecommissionedAt:       decommissioned,
		}
		st := &stream{
			Indexed: catalog.NewIndexed(s),
			hidden:  strings.HasPrefix(state, "H"),
			id:      id,
			idHex:   s.FeedID,
			schema:  d.schema,
			created: created,
			decom:   decom,
			delay:   delayOf(d, h),
			model:   newModel(network, d, id),
		}
		st.json = mustJSON(s)
		st.refJSON = mustJSON(catalog.FeedRef{FeedID: s.FeedID})
		out = append(out, st)
	}
	sortStreams(out)
	for i, s := range out {
		s.idx = i
	}
	return out
}

// delayOf is the publication lag of a stream: none for crypto market data,
// up to a second for equities and FX, one to three seconds for Datalink
// products (NAV, macro, SmartData).
func delayOf(d def, h uint64) int64 {
	switch {
	case d.serviceLevel() == "Datalink":
		return 1 + int64(h>>8%3)
	case d.class == cEquities || d.class == cForex:
		return int64(h >> 8 % 2)
	}
	return 0
}
