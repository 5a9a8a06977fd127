#!/usr/bin/env python3
"""hotline_lookup.py - the hotline pipeline's tool stage: a stand-in for the
agency's knowledge base and account systems.

Called by the router without a shell:  hotline_lookup.py INTENT
stdin:  the extract stage's JSON ({"topic": ..., "account": ..., ...}), or empty
stdout: one JSON object with the facts the composer may use.
Deterministic on purpose: the same call gives the same answer (and cache key).
"""
import json
import sys

FACTS = {
    "social_insurance": {
        "service": "Social insurance (社保) contribution records and pensions",
        "how": "Check contribution records in the 12333 app or at any social insurance office with your ID card; "
               "printouts are free.",
        "hotline": "12333", "hours": "Mon-Fri 8:30-17:30",
    },
    "housing_fund": {
        "service": "Housing provident fund (公积金) balance, withdrawal and loans",
        "how": "Withdrawals for rent or purchase are applied for in the housing fund app or at a service hall; "
               "bring your ID card and the contract. Money arrives in 3 working days.",
        "hotline": "12329", "hours": "Mon-Fri 9:00-17:00",
    },
    "household_registration": {
        "service": "Household registration (户口/户籍) transfers, ID cards and residence permits",
        "how": "Transfers and ID card renewals are handled at the local police station's household registration "
               "window; book a slot online first.",
        "hotline": "110 (non-emergency: 12345)", "hours": "Mon-Sat 9:00-17:00",
    },
    "medical_insurance": {
        "service": "Medical insurance (医保) reimbursement and cards",
        "how": "Hospital bills are settled directly with the medical insurance card; out-of-town claims are filed "
               "in the national medical insurance app within 6 months.",
        "hotline": "12393", "hours": "Mon-Fri 8:30-17:00",
    },
    "utilities_billing": {
        "service": "Water, electricity and gas bills (水电燃气费)",
        "how": "Disputed readings are rechecked for free within 5 working days; report the meter number. "
               "Bills can be paid in the utility's app or at a bank.",
        "hotline": "95598 (power), 96116 (water)", "hours": "24 hours",
    },
}


def main():
    intent = sys.argv[1] if len(sys.argv) > 1 else ""
    raw = sys.stdin.read().strip()
    try:
        request = json.loads(raw) if raw else {}
    except ValueError:
        request = {}
    facts = FACTS.get(intent)
    if facts is None:
        print(json.dumps({"intent": intent, "found": False, "how": "Transfer the caller to a human agent."}))
        return 0
    out = {"intent": intent, "found": True, **facts}
    account = request.get("account") if isinstance(request, dict) else None
    if account:
        out["account"] = str(account)
        out["account_status"] = "record found; last update 3 days ago"
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
